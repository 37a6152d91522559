//! The kernel side: every sync is one `nft -f -` transaction, so the kernel never holds half a
//! ruleset. Behind a trait so tests use a recording fake, and a command prefix so tests run
//! everything inside a network namespace (`ip netns exec NS`).

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::render::{NftRuleset, Plan, TABLE, partial_script};
use crate::iptables::Error;

/// What the proxier needs from nftables.
pub trait Nft: Send + Sync {
    /// `nft -f -` with `script`: one transaction, all or nothing.
    fn run(&self, script: &str) -> Result<(), Error>;
    /// `nft <args>` (e.g. `list table ip kube-proxy`), its output.
    fn list(&self, args: &[&str]) -> Result<String, Error>;
}

/// The `nft` binary, optionally run through a prefix such as `ip netns exec NS`.
#[derive(Clone, Debug, Default)]
pub struct CommandNft {
    pub prefix: Vec<String>,
}

impl CommandNft {
    fn output(&self, args: &[&str], input: Option<&str>) -> Result<std::process::Output, Error> {
        let mut cmd = match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg("nft");
                c
            }
            None => Command::new("nft"),
        };
        cmd.args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = format!("{cmd:?}");
        let mut child = cmd.spawn().map_err(|e| Error::Spawn(what.clone(), e))?;
        if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(data.as_bytes())
                .map_err(|e| Error::Spawn(what.clone(), e))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| Error::Spawn(what.clone(), e))?;
        if !out.status.success() {
            return Err(Error::Failed(
                what,
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Ok(out)
    }
}

impl Nft for CommandNft {
    fn run(&self, script: &str) -> Result<(), Error> {
        self.output(&["-f", "-"], Some(script)).map(|_| ())
    }

    fn list(&self, args: &[&str]) -> Result<String, Error> {
        let out = self.output(args, None)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// A fake that records every script it was given.
#[derive(Default)]
pub struct FakeNft {
    pub scripts: Mutex<Vec<String>>,
}

impl Nft for FakeNft {
    fn run(&self, script: &str) -> Result<(), Error> {
        self.scripts.lock().unwrap().push(script.to_string());
        Ok(())
    }
    fn list(&self, _args: &[&str]) -> Result<String, Error> {
        Ok(String::new())
    }
}

/// What one [`Syncer::sync`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// Our table replaced as a whole.
    Full,
    /// Only what changed since the previous sync was sent.
    Partial,
    /// Nothing changed since the previous sync; nft was not run.
    Unchanged,
}

/// How often a full sync runs although partial ones would do, as upstream (an hour): it repairs
/// whatever someone else changed in our table. A full sync recreates the table, which also
/// forgets the clients remembered for session affinity, hence not every sync period.
pub const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

/// The proxier's memory between syncs: what the last successful sync put in the kernel, so
/// that the next one sends only the difference. A full sync runs first, after any failure (the
/// kernel's state is then unknown), and once per `full_every`.
pub struct Syncer {
    nft: Arc<dyn Nft>,
    full_every: Duration,
    applied: Option<NftRuleset>,
    last_full: Option<Instant>,
}

impl Syncer {
    pub fn new(nft: Arc<dyn Nft>, full_every: Duration) -> Syncer {
        Syncer {
            nft,
            full_every,
            applied: None,
            last_full: None,
        }
    }

    /// Puts `next` into the kernel, partially when the previous sync's result can be trusted.
    pub fn sync(&mut self, next: NftRuleset) -> Result<SyncKind, Error> {
        let full_due = self
            .last_full
            .is_none_or(|t| t.elapsed() >= self.full_every);
        // Taken, so that a failure below leaves nothing to diff against: the next sync is full.
        let applied = self.applied.take();
        let plan = match &applied {
            Some(applied) if !full_due => partial_script(applied, &next),
            _ => Plan::Full,
        };
        let kind = match plan {
            Plan::Unchanged => SyncKind::Unchanged,
            Plan::Partial(script) => {
                self.nft.run(&script)?;
                SyncKind::Partial
            }
            Plan::Full => {
                self.nft.run(&next.to_script())?;
                self.last_full = Some(Instant::now());
                SyncKind::Full
            }
        };
        self.applied = Some(next);
        Ok(kind)
    }
}

/// `--cleanup`: removes our table (and with it every chain, map and set), if it exists.
pub fn cleanup(nft: &dyn Nft) -> Result<(), Error> {
    nft.run(&format!("add table ip {TABLE}\ndelete table ip {TABLE}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::render::ProxyState;
    use crate::nftables::render::render_ruleset;

    fn state(cluster_ip: &str) -> ProxyState {
        let svc = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"clusterIP": cluster_ip, "ports": [{"port": 80}]}
        }))
        .unwrap();
        ProxyState {
            services: vec![svc],
            ..ProxyState::default()
        }
    }

    #[test]
    fn syncer_replaces_the_table_first_then_sends_only_changes() {
        let fake = Arc::new(FakeNft::default());
        let mut syncer = Syncer::new(fake.clone(), FULL_SYNC_PERIOD);
        let first = render_ruleset(&state("10.96.0.1"));
        assert_eq!(syncer.sync(first.clone()).unwrap(), SyncKind::Full);
        assert_eq!(fake.scripts.lock().unwrap()[0], first.to_script());

        assert_eq!(syncer.sync(first.clone()).unwrap(), SyncKind::Unchanged);
        assert_eq!(fake.scripts.lock().unwrap().len(), 1);

        let second = render_ruleset(&state("10.96.0.2"));
        assert_eq!(syncer.sync(second.clone()).unwrap(), SyncKind::Partial);
        let scripts = fake.scripts.lock().unwrap();
        assert_eq!(
            Plan::Partial(scripts[1].clone()),
            partial_script(&first, &second),
            "the partial sync is the diff against what was applied"
        );
        assert_eq!(
            scripts[1],
            "delete element ip kube-proxy no-endpoint-services { 10.96.0.1 . tcp . 80 }\n\
             add element ip kube-proxy no-endpoint-services { 10.96.0.2 . tcp . 80 : goto reject-chain }\n"
        );
    }

    #[test]
    fn syncer_is_full_again_when_due() {
        let fake = Arc::new(FakeNft::default());
        let mut syncer = Syncer::new(fake.clone(), Duration::ZERO);
        let rules = render_ruleset(&state("10.96.0.1"));
        assert_eq!(syncer.sync(rules.clone()).unwrap(), SyncKind::Full);
        assert_eq!(syncer.sync(rules).unwrap(), SyncKind::Full);
        assert_eq!(fake.scripts.lock().unwrap().len(), 2);
    }

    /// Fails every run while `failing` is set.
    #[derive(Default)]
    struct Switch {
        fake: FakeNft,
        failing: Mutex<bool>,
    }

    impl Nft for Switch {
        fn run(&self, script: &str) -> Result<(), Error> {
            if *self.failing.lock().unwrap() {
                return Err(Error::Failed("nft".into(), "boom".into()));
            }
            self.fake.run(script)
        }
        fn list(&self, args: &[&str]) -> Result<String, Error> {
            self.fake.list(args)
        }
    }

    #[test]
    fn a_failed_sync_makes_the_next_one_full() {
        let switch = Arc::new(Switch::default());
        let mut syncer = Syncer::new(switch.clone(), FULL_SYNC_PERIOD);
        let first = render_ruleset(&state("10.96.0.1"));
        let second = render_ruleset(&state("10.96.0.2"));
        assert_eq!(syncer.sync(first).unwrap(), SyncKind::Full);
        *switch.failing.lock().unwrap() = true;
        assert!(syncer.sync(second.clone()).is_err());
        *switch.failing.lock().unwrap() = false;
        assert_eq!(syncer.sync(second.clone()).unwrap(), SyncKind::Full);
        assert_eq!(switch.fake.scripts.lock().unwrap()[1], second.to_script());
    }
}
