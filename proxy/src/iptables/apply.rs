//! The kernel side: `iptables-restore` for the rendered tables and `iptables -C/-I` for the
//! jumps from the built-in chains (which a `--noflush` restore cannot own without flushing
//! everybody else's rules). Behind a trait so tests use a recording fake, and a command prefix
//! so tests run everything inside a network namespace (`ip netns exec NS`).

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Error;
use super::render::{
    FILTER_CHAINS, NAT_CHAINS, Ruleset, SERVICE_CHAIN_PREFIXES, partial_restore, saved_chains,
};
use crate::metrics::{ProxyMetrics, rules_by_table};

/// What the proxier needs from iptables.
pub trait Iptables: Send + Sync {
    /// `iptables-restore -w --noflush` with `data`.
    fn restore(&self, data: &str) -> Result<(), Error>;
    /// `iptables-save -t table`.
    fn save(&self, table: &str) -> Result<String, Error>;
    /// Whether `-A chain args` exists (`iptables -C`).
    fn check(&self, table: &str, chain: &str, args: &[&str]) -> Result<bool, Error>;
    /// `iptables -I chain args`.
    fn insert(&self, table: &str, chain: &str, args: &[&str]) -> Result<(), Error>;
    /// `iptables -D chain args`.
    fn delete(&self, table: &str, chain: &str, args: &[&str]) -> Result<(), Error>;
}

/// The iptables binaries, optionally run through a prefix such as `ip netns exec NS`.
#[derive(Clone, Debug, Default)]
pub struct CommandIptables {
    pub prefix: Vec<String>,
}

impl CommandIptables {
    fn command(&self, program: &str) -> Command {
        let mut c = match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        };
        c.stdin(Stdio::null());
        c
    }

    fn run(&self, mut cmd: Command, input: Option<&str>) -> Result<std::process::Output, Error> {
        let what = format!("{cmd:?}");
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| Error::Spawn(what.clone(), e))?;
        if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(data.as_bytes())
                .map_err(|e| Error::Spawn(what.clone(), e))?;
        }
        child.wait_with_output().map_err(|e| Error::Spawn(what, e))
    }

    fn rule(&self, op: &str, table: &str, chain: &str, args: &[&str]) -> Command {
        let mut c = self.command("iptables");
        c.args(["-w", "5", "-t", table, op, chain]).args(args);
        c
    }
}

fn failed(what: &str, out: &std::process::Output) -> Error {
    Error::Failed(
        what.to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

impl Iptables for CommandIptables {
    fn restore(&self, data: &str) -> Result<(), Error> {
        let mut c = self.command("iptables-restore");
        c.args(["-w", "5", "--noflush"]);
        let out = self.run(c, Some(data))?;
        if !out.status.success() {
            return Err(failed("iptables-restore", &out));
        }
        Ok(())
    }

    fn save(&self, table: &str) -> Result<String, Error> {
        let mut c = self.command("iptables-save");
        c.args(["-t", table]);
        let out = self.run(c, None)?;
        if !out.status.success() {
            return Err(failed("iptables-save", &out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn check(&self, table: &str, chain: &str, args: &[&str]) -> Result<bool, Error> {
        let out = self.run(self.rule("-C", table, chain, args), None)?;
        // 1: no such rule; 2 or more: a real error (no such chain, bad arguments).
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(failed("iptables -C", &out)),
        }
    }

    fn insert(&self, table: &str, chain: &str, args: &[&str]) -> Result<(), Error> {
        let out = self.run(self.rule("-I", table, chain, args), None)?;
        if !out.status.success() {
            return Err(failed("iptables -I", &out));
        }
        Ok(())
    }

    fn delete(&self, table: &str, chain: &str, args: &[&str]) -> Result<(), Error> {
        let out = self.run(self.rule("-D", table, chain, args), None)?;
        if !out.status.success() {
            return Err(failed("iptables -D", &out));
        }
        Ok(())
    }
}

/// A jump from a built-in chain into ours.
pub struct Jump {
    pub table: &'static str,
    pub chain: &'static str,
    pub args: &'static [&'static str],
}

/// kube-proxy's jumps from the built-in chains (`iptablesJumpChains` upstream).
pub const JUMPS: &[Jump] = &[
    Jump {
        table: "filter",
        chain: "INPUT",
        args: &[
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes externally-visible service portals",
            "-j",
            "KUBE-EXTERNAL-SERVICES",
        ],
    },
    Jump {
        table: "filter",
        chain: "FORWARD",
        args: &[
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes externally-visible service portals",
            "-j",
            "KUBE-EXTERNAL-SERVICES",
        ],
    },
    Jump {
        table: "filter",
        chain: "INPUT",
        args: &[
            "-m",
            "comment",
            "--comment",
            "kubernetes health check service ports",
            "-j",
            "KUBE-NODEPORTS",
        ],
    },
    Jump {
        table: "filter",
        chain: "FORWARD",
        args: &[
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES",
        ],
    },
    Jump {
        table: "filter",
        chain: "OUTPUT",
        args: &[
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES",
        ],
    },
    Jump {
        table: "filter",
        chain: "FORWARD",
        args: &[
            "-m",
            "comment",
            "--comment",
            "kubernetes forwarding rules",
            "-j",
            "KUBE-FORWARD",
        ],
    },
    Jump {
        table: "filter",
        chain: "INPUT",
        args: &[
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes load balancer firewall",
            "-j",
            "KUBE-PROXY-FIREWALL",
        ],
    },
    Jump {
        table: "filter",
        chain: "OUTPUT",
        args: &[
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes load balancer firewall",
            "-j",
            "KUBE-PROXY-FIREWALL",
        ],
    },
    Jump {
        table: "filter",
        chain: "FORWARD",
        args: &[
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes load balancer firewall",
            "-j",
            "KUBE-PROXY-FIREWALL",
        ],
    },
    Jump {
        table: "filter",
        chain: "INPUT",
        args: &["-j", "KUBE-FIREWALL"],
    },
    Jump {
        table: "filter",
        chain: "OUTPUT",
        args: &["-j", "KUBE-FIREWALL"],
    },
    Jump {
        table: "nat",
        chain: "OUTPUT",
        args: &[
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES",
        ],
    },
    Jump {
        table: "nat",
        chain: "PREROUTING",
        args: &[
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES",
        ],
    },
    Jump {
        table: "nat",
        chain: "POSTROUTING",
        args: &[
            "-m",
            "comment",
            "--comment",
            "kubernetes postrouting rules",
            "-j",
            "KUBE-POSTROUTING",
        ],
    },
];

/// One sync: restore the rendered tables (deleting per-service chains that disappeared), then
/// make sure the built-in chains jump into ours.
pub fn apply(ipt: &dyn Iptables, rendered: &str) -> Result<(), Error> {
    let mut existing = ipt.save("filter")?;
    existing.push_str(&ipt.save("nat")?);
    let data = super::render::with_stale_chains_deleted(rendered, &existing);
    ipt.restore(&data)?;
    for j in JUMPS {
        if !ipt.check(j.table, j.chain, j.args)? {
            ipt.insert(j.table, j.chain, j.args)?;
        }
    }
    Ok(())
}

/// What one [`Syncer::sync`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// Stale chains swept (from iptables-save), the whole ruleset restored, jumps ensured.
    Full,
    /// Only the chains that changed since the previous sync were restored.
    Partial,
    /// Nothing changed since the previous sync; iptables was not run.
    Unchanged,
}

/// The proxier's memory between syncs: the ruleset the last successful sync put in the kernel,
/// so that the next one rewrites only the chains that changed. With 10,000 Services a full
/// restore rewrites some 50,000 rules, which is far too slow for every endpoint change (upstream
/// does partial syncs for the same reason). A full sync runs first, after any failure (the
/// kernel's state is then unknown), and once per `full_every` (hourly, as upstream), which also
/// repairs rules someone else changed; upstream also watches canary chains for flushes, which
/// this proxier does not.
pub struct Syncer {
    ipt: Arc<dyn Iptables>,
    full_every: Duration,
    applied: Option<Ruleset>,
    last_full: Option<Instant>,
    metrics: Option<Arc<ProxyMetrics>>,
}

impl Syncer {
    pub fn new(ipt: Arc<dyn Iptables>, full_every: Duration) -> Syncer {
        Syncer {
            ipt,
            full_every,
            applied: None,
            last_full: None,
            metrics: None,
        }
    }

    /// Rule counts and restore failures go to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<ProxyMetrics>) -> Syncer {
        self.metrics = Some(metrics);
        self
    }

    /// Puts `next` into the kernel, partially when the previous sync's result can be trusted.
    pub fn sync(&mut self, next: Ruleset) -> Result<SyncKind, Error> {
        let full_due = self
            .last_full
            .is_none_or(|t| t.elapsed() >= self.full_every);
        // Taken, so that a failure below leaves nothing to diff against: the next sync is full.
        let applied = self.applied.take();
        let failed = |partial: bool| {
            let metrics = self.metrics.clone();
            move |e: Error| {
                if let Some(m) = &metrics {
                    m.iptables_restore_failed(partial);
                }
                e
            }
        };
        let (kind, written) = match applied {
            Some(applied) if !full_due => match partial_restore(&applied, &next) {
                Some(data) => {
                    self.ipt.restore(&data).map_err(failed(true))?;
                    (SyncKind::Partial, rules_by_table(&data))
                }
                None => (SyncKind::Unchanged, Default::default()),
            },
            _ => {
                let data = next.to_restore();
                apply(self.ipt.as_ref(), &data).map_err(failed(false))?;
                self.last_full = Some(Instant::now());
                (SyncKind::Full, rules_by_table(&data))
            }
        };
        if let Some(m) = &self.metrics {
            let total = next
                .tables
                .iter()
                .map(|t| {
                    (
                        t.name.to_string(),
                        t.chains.iter().map(|(_, r)| r.len()).sum(),
                    )
                })
                .collect();
            m.iptables_rules(&total, &written);
        }
        self.applied = Some(next);
        Ok(kind)
    }
}

/// `--cleanup`: removes the jumps and every chain the proxier owns.
pub fn cleanup(ipt: &dyn Iptables) -> Result<(), Error> {
    for j in JUMPS {
        while ipt.check(j.table, j.chain, j.args).unwrap_or(false) {
            ipt.delete(j.table, j.chain, j.args)?;
        }
    }
    let mut data = String::new();
    for (table, statics) in [("filter", &FILTER_CHAINS[..]), ("nat", &NAT_CHAINS[..])] {
        let ours: Vec<String> = saved_chains(&ipt.save(table)?, table)
            .into_iter()
            .filter(|c| {
                statics.contains(&c.as_str())
                    || SERVICE_CHAIN_PREFIXES.iter().any(|p| c.starts_with(p))
            })
            .collect();
        data.push_str(&delete_chains(table, &ours));
    }
    ipt.restore(&data)
}

/// `iptables-restore --noflush` input that flushes and deletes `chains` of `table`.
pub fn delete_chains(table: &str, chains: &[String]) -> String {
    let mut data = format!("*{table}\n");
    for c in chains {
        data.push_str(&format!(":{c} - [0:0]\n"));
    }
    for c in chains {
        data.push_str(&format!("-X {c}\n"));
    }
    data.push_str("COMMIT\n");
    data
}

/// A fake that records calls and keeps the restored text; `check` answers from the jumps it
/// inserted.
#[derive(Default)]
pub struct FakeIptables {
    pub restored: Mutex<Vec<String>>,
    pub jumps: Mutex<Vec<String>>,
}

impl Iptables for FakeIptables {
    fn restore(&self, data: &str) -> Result<(), Error> {
        self.restored.lock().unwrap().push(data.to_string());
        Ok(())
    }
    fn save(&self, _table: &str) -> Result<String, Error> {
        Ok(String::new())
    }
    fn check(&self, table: &str, chain: &str, args: &[&str]) -> Result<bool, Error> {
        let rule = format!("{table} {chain} {}", args.join(" "));
        Ok(self.jumps.lock().unwrap().contains(&rule))
    }
    fn insert(&self, table: &str, chain: &str, args: &[&str]) -> Result<(), Error> {
        let rule = format!("{table} {chain} {}", args.join(" "));
        self.jumps.lock().unwrap().push(rule);
        Ok(())
    }
    fn delete(&self, table: &str, chain: &str, args: &[&str]) -> Result<(), Error> {
        let rule = format!("{table} {chain} {}", args.join(" "));
        self.jumps.lock().unwrap().retain(|r| *r != rule);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::render::render_rules;
    use crate::iptables::render::tests::one_service as state;

    #[test]
    fn syncer_restores_everything_first_then_only_changes() {
        let fake = Arc::new(FakeIptables::default());
        let mut syncer = Syncer::new(fake.clone(), Duration::from_secs(3600));
        let first = render_rules(&state("10.96.0.1"));
        assert_eq!(syncer.sync(first.clone()).unwrap(), SyncKind::Full);
        assert_eq!(fake.restored.lock().unwrap()[0], first.to_restore());
        assert_eq!(fake.jumps.lock().unwrap().len(), JUMPS.len());

        assert_eq!(syncer.sync(first.clone()).unwrap(), SyncKind::Unchanged);
        assert_eq!(fake.restored.lock().unwrap().len(), 1);

        let second = render_rules(&state("10.96.0.2"));
        assert_eq!(syncer.sync(second.clone()).unwrap(), SyncKind::Partial);
        let restored = fake.restored.lock().unwrap();
        assert_eq!(restored.len(), 2);
        assert_eq!(
            Some(restored[1].clone()),
            partial_restore(&first, &second),
            "the partial restore is the diff against what was applied"
        );
    }

    #[test]
    fn syncer_is_full_again_when_due() {
        let fake = Arc::new(FakeIptables::default());
        let mut syncer = Syncer::new(fake.clone(), Duration::ZERO);
        let rules = render_rules(&state("10.96.0.1"));
        assert_eq!(syncer.sync(rules.clone()).unwrap(), SyncKind::Full);
        assert_eq!(syncer.sync(rules.clone()).unwrap(), SyncKind::Full);
        assert_eq!(fake.restored.lock().unwrap().len(), 2);
    }

    /// Forwards to `fake`, except that restores fail while `failing` is set.
    struct Switch {
        fake: Arc<FakeIptables>,
        failing: Mutex<bool>,
    }

    impl Iptables for Switch {
        fn restore(&self, data: &str) -> Result<(), Error> {
            if *self.failing.lock().unwrap() {
                return Err(Error::Failed("iptables-restore".into(), "boom".into()));
            }
            self.fake.restore(data)
        }
        fn save(&self, table: &str) -> Result<String, Error> {
            self.fake.save(table)
        }
        fn check(&self, table: &str, chain: &str, args: &[&str]) -> Result<bool, Error> {
            self.fake.check(table, chain, args)
        }
        fn insert(&self, table: &str, chain: &str, args: &[&str]) -> Result<(), Error> {
            self.fake.insert(table, chain, args)
        }
        fn delete(&self, table: &str, chain: &str, args: &[&str]) -> Result<(), Error> {
            self.fake.delete(table, chain, args)
        }
    }

    #[test]
    fn a_failed_sync_makes_the_next_one_full() {
        let fake = Arc::new(FakeIptables::default());
        let switch = Arc::new(Switch {
            fake: fake.clone(),
            failing: Mutex::new(false),
        });
        let metrics = Arc::new(ProxyMetrics::new(
            crate::metrics::Mode::Iptables,
            Duration::from_secs(60),
        ));
        let mut syncer =
            Syncer::new(switch.clone(), Duration::from_secs(3600)).with_metrics(metrics.clone());
        let first = render_rules(&state("10.96.0.1"));
        let second = render_rules(&state("10.96.0.2"));
        assert_eq!(syncer.sync(first).unwrap(), SyncKind::Full);
        *switch.failing.lock().unwrap() = true;
        assert!(syncer.sync(second.clone()).is_err());
        // A partial restore failed: counted as both.
        let text = metrics.render();
        for failures in [
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total 1\n",
            "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total 1\n",
        ] {
            assert!(text.contains(failures), "{failures}");
        }
        *switch.failing.lock().unwrap() = false;
        assert_eq!(syncer.sync(second.clone()).unwrap(), SyncKind::Full);
        let total = |table: &str| {
            second
                .tables
                .iter()
                .filter(|t| t.name == table)
                .flat_map(|t| &t.chains)
                .map(|(_, r)| r.len())
                .sum::<usize>()
        };
        let text = metrics.render();
        for table in ["filter", "nat"] {
            // A full sync writes every rule the proxier owns.
            for family in ["total", "last"] {
                let series = format!(
                    "kubeproxy_sync_proxy_rules_iptables_{family}{{table=\"{table}\"}} {}\n",
                    total(table)
                );
                assert!(text.contains(&series), "{series}{text}");
            }
        }
        assert_eq!(fake.restored.lock().unwrap()[1], second.to_restore());
    }
}
