//! The kernel side: every sync is one `nft -f -` transaction, so the kernel never holds half a
//! ruleset. Behind a trait so tests use a recording fake, and a command prefix so tests run
//! everything inside a network namespace (`ip netns exec NS`).

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::render::{NftRuleset, Plan, TABLE, partial_script, service_ruleset, static_ruleset};
use crate::endpoints::{SERVICE_NAME_LABEL, is_headless, service_key};
use crate::iptables::Error;
use crate::iptables::render::{ProxyConfig, ProxyState};

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

/// `(namespace, name)` of a Service.
type ServiceKey = (String, String);

/// One Service as last rendered: the objects it was rendered from (the reflector hands out the
/// same `Arc` while an object is unchanged, so a pointer comparison usually decides) and its
/// piece of the table.
struct Rendered {
    service: Arc<Service>,
    slices: Vec<Arc<EndpointSlice>>,
    rules: NftRuleset,
}

impl Rendered {
    fn same_input(&self, service: &Arc<Service>, slices: &[&Arc<EndpointSlice>]) -> bool {
        let same = |a: &Arc<EndpointSlice>, b: &Arc<EndpointSlice>| Arc::ptr_eq(a, b) || a == b;
        (Arc::ptr_eq(&self.service, service) || self.service == *service)
            && self.slices.len() == slices.len()
            && self.slices.iter().zip(slices).all(|(a, b)| same(a, b))
    }
}

/// The proxier's memory between syncs, as upstream's change trackers: every Service's piece of
/// the table as last rendered, so that a sync re-renders only the Services whose Service or
/// EndpointSlices changed and sends the kernel only their differences. A full sync runs first,
/// after any failure (the kernel's state is then unknown), when the configuration changed, and
/// once per `full_every`.
pub struct Syncer {
    nft: Arc<dyn Nft>,
    full_every: Duration,
    config: Option<ProxyConfig>,
    services: BTreeMap<ServiceKey, Rendered>,
    /// Which Services put each map or set element in, in key order: the first one's value is
    /// in the kernel (two Services may share an element, e.g. an endpoint's hairpin pair).
    owners: HashMap<(&'static str, String), BTreeSet<ServiceKey>>,
    in_kernel: bool,
    last_full: Option<Instant>,
}

impl Syncer {
    pub fn new(nft: Arc<dyn Nft>, full_every: Duration) -> Syncer {
        Syncer {
            nft,
            full_every,
            config: None,
            services: BTreeMap::new(),
            owners: HashMap::new(),
            in_kernel: false,
            last_full: None,
        }
    }

    /// [`Syncer::sync`] for owned objects (tests, benchmarks): unchanged objects are then
    /// recognised by comparing them.
    pub fn sync_state(&mut self, state: &ProxyState) -> Result<SyncKind, Error> {
        let services: Vec<Arc<Service>> = state.services.iter().cloned().map(Arc::new).collect();
        let slices: Vec<Arc<EndpointSlice>> = state.slices.iter().cloned().map(Arc::new).collect();
        self.sync(&state.config, &services, &slices)
    }

    /// Brings the kernel to the table for these Services and slices: re-renders the Services
    /// whose inputs changed since the previous sync and sends only their differences, or
    /// replaces the whole table when a full sync is due.
    pub fn sync(
        &mut self,
        config: &ProxyConfig,
        services: &[Arc<Service>],
        slices: &[Arc<EndpointSlice>],
    ) -> Result<SyncKind, Error> {
        if self.config.as_ref() != Some(config) {
            self.config = Some(config.clone());
            self.services.clear();
            self.owners.clear();
            self.in_kernel = false;
        }
        let mut by_service: HashMap<(&str, &str), Vec<&Arc<EndpointSlice>>> = HashMap::new();
        for slice in slices {
            let ns = slice.metadata.namespace.as_deref();
            let svc = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL));
            if let (Some(ns), Some(svc)) = (ns, svc) {
                by_service
                    .entry((ns, svc.as_str()))
                    .or_default()
                    .push(slice);
            }
        }
        // The Services to re-render or remove, with their new piece.
        let mut dirty: Vec<(ServiceKey, Option<Rendered>)> = Vec::new();
        let mut seen: HashSet<ServiceKey> = HashSet::with_capacity(services.len());
        for svc in services {
            if is_headless(svc) {
                continue;
            }
            let key = service_key(svc);
            if !seen.insert(key.clone()) {
                continue;
            }
            let mut own = by_service
                .get(&(key.0.as_str(), key.1.as_str()))
                .cloned()
                .unwrap_or_default();
            own.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            if self
                .services
                .get(&key)
                .is_some_and(|r| r.same_input(svc, &own))
            {
                continue;
            }
            let refs: Vec<&EndpointSlice> = own.iter().map(|s| s.as_ref()).collect();
            let rendered = Rendered {
                rules: service_ruleset(config, svc, &refs),
                service: svc.clone(),
                slices: own.into_iter().cloned().collect(),
            };
            dirty.push((key, Some(rendered)));
        }
        for key in self.services.keys().filter(|k| !seen.contains(*k)) {
            dirty.push((key.clone(), None));
        }

        let full_due = !self.in_kernel
            || self
                .last_full
                .is_none_or(|t| t.elapsed() >= self.full_every);
        // Every element a dirty Service had or will have: what the kernel holds for them now,
        // then what it should hold.
        let mut touched: BTreeSet<(&'static str, String)> = BTreeSet::new();
        for (key, new) in &dirty {
            for piece in [self.services.get(key), new.as_ref()].into_iter().flatten() {
                for (map, elements) in &piece.rules.maps {
                    touched.extend(elements.keys().map(|k| (*map, k.clone())));
                }
            }
        }
        let mut before = NftRuleset::default();
        if !full_due {
            for (key, _) in &dirty {
                if let Some(old) = self.services.get(key) {
                    before.add_structure(&old.rules);
                }
            }
            before.maps = self.effective(&touched);
        }
        let mut after = NftRuleset::default();
        for (key, new) in dirty {
            if let Some(old) = self.services.remove(&key) {
                for (map, elements) in &old.rules.maps {
                    for k in elements.keys() {
                        let owned = (*map, k.clone());
                        if let Some(o) = self.owners.get_mut(&owned) {
                            o.remove(&key);
                            if o.is_empty() {
                                self.owners.remove(&owned);
                            }
                        }
                    }
                }
            }
            if let Some(new) = new {
                for (map, elements) in &new.rules.maps {
                    for k in elements.keys() {
                        self.owners
                            .entry((*map, k.clone()))
                            .or_default()
                            .insert(key.clone());
                    }
                }
                if !full_due {
                    after.add_structure(&new.rules);
                }
                self.services.insert(key, new);
            }
        }
        let plan = if full_due {
            Plan::Full
        } else {
            after.maps = self.effective(&touched);
            partial_script(&before, &after)
        };
        // Until this sync succeeds the kernel's state is unknown: the next one is then full.
        self.in_kernel = false;
        let kind = match plan {
            Plan::Unchanged => SyncKind::Unchanged,
            Plan::Partial(script) => {
                self.nft.run(&script)?;
                SyncKind::Partial
            }
            Plan::Full => {
                self.nft.run(&self.ruleset().to_script())?;
                self.last_full = Some(Instant::now());
                SyncKind::Full
            }
        };
        self.in_kernel = true;
        Ok(kind)
    }

    /// The whole table as the Services last rendered make it.
    pub fn ruleset(&self) -> NftRuleset {
        let mut r = static_ruleset(self.config.as_ref().unwrap_or(&ProxyConfig::default()));
        for rendered in self.services.values() {
            r.merge(&rendered.rules);
        }
        r
    }

    /// The value in the table of each of `elements`, as its first owner has it.
    fn effective(
        &self,
        elements: &BTreeSet<(&'static str, String)>,
    ) -> BTreeMap<&'static str, BTreeMap<String, String>> {
        let mut out: BTreeMap<&'static str, BTreeMap<String, String>> = BTreeMap::new();
        for (map, k) in elements {
            let owners = self.owners.get(&(*map, k.clone()));
            let value = owners
                .and_then(|o| o.first())
                .and_then(|owner| self.services.get(owner))
                .and_then(|r| r.rules.maps.get(map))
                .and_then(|m| m.get(k));
            if let Some(v) = value {
                out.entry(*map).or_default().insert(k.clone(), v.clone());
            }
        }
        out
    }
}

/// `--cleanup`: removes our table (and with it every chain, map and set), if it exists.
pub fn cleanup(nft: &dyn Nft) -> Result<(), Error> {
    nft.run(&format!("add table ip {TABLE}\ndelete table ip {TABLE}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::render::tests::{one_service as state, web};
    use crate::nftables::render::render_ruleset;

    #[test]
    fn syncer_replaces_the_table_first_then_sends_only_changes() {
        let fake = Arc::new(FakeNft::default());
        let mut syncer = Syncer::new(fake.clone(), FULL_SYNC_PERIOD);
        let first = state("10.96.0.1");
        assert_eq!(syncer.sync_state(&first).unwrap(), SyncKind::Full);
        assert_eq!(
            fake.scripts.lock().unwrap()[0],
            render_ruleset(&first).to_script()
        );

        assert_eq!(syncer.sync_state(&first).unwrap(), SyncKind::Unchanged);
        assert_eq!(fake.scripts.lock().unwrap().len(), 1);

        let second = state("10.96.0.2");
        assert_eq!(syncer.sync_state(&second).unwrap(), SyncKind::Partial);
        let scripts = fake.scripts.lock().unwrap();
        assert_eq!(
            Plan::Partial(scripts[1].clone()),
            partial_script(&render_ruleset(&first), &render_ruleset(&second)),
            "the partial sync is the diff of the whole tables"
        );
        assert_eq!(
            scripts[1],
            "delete element ip kube-proxy no-endpoint-services { 10.96.0.1 . tcp . 80 }\n\
             add element ip kube-proxy no-endpoint-services { 10.96.0.2 . tcp . 80 : goto reject-chain }\n"
        );
    }

    /// `web` (endpoints as given) plus `api`, which shares the endpoint 10.244.0.2.
    fn two_services(web_endpoints: &[&str], with_api: bool) -> ProxyState {
        let mut state = web(web_endpoints);
        if with_api {
            let api = serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "default", "name": "api"},
                "spec": {"clusterIP": "10.96.0.30", "ports": [{"port": 443, "targetPort": 8080}]}
            }))
            .unwrap();
            state.services.push(api);
            let mut slice = web(&["10.244.0.2"]).slices.remove(0);
            slice.metadata.name = Some("api-1".into());
            slice
                .metadata
                .labels
                .as_mut()
                .unwrap()
                .insert(crate::endpoints::SERVICE_NAME_LABEL.into(), "api".into());
            state.slices.push(slice);
        }
        state
    }

    #[test]
    fn incremental_syncs_send_what_a_diff_of_the_whole_tables_sends() {
        let fake = Arc::new(FakeNft::default());
        let mut syncer = Syncer::new(fake.clone(), FULL_SYNC_PERIOD);
        let steps = [
            two_services(&["10.244.0.2"], true),
            two_services(&["10.244.0.2", "10.244.0.3"], true),
            // `web` loses the endpoint it shares with `api`: the hairpin pair stays.
            two_services(&["10.244.0.3"], true),
            two_services(&[], true),
            two_services(&["10.244.0.2"], false),
            two_services(&["10.244.0.2"], true),
        ];
        assert_eq!(syncer.sync_state(&steps[0]).unwrap(), SyncKind::Full);
        for pair in steps.windows(2) {
            let expected = partial_script(&render_ruleset(&pair[0]), &render_ruleset(&pair[1]));
            let before = fake.scripts.lock().unwrap().len();
            let kind = syncer.sync_state(&pair[1]).unwrap();
            let scripts = fake.scripts.lock().unwrap();
            match expected {
                Plan::Partial(script) => {
                    assert_eq!(kind, SyncKind::Partial);
                    assert_eq!(scripts[before], script);
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(syncer.ruleset(), render_ruleset(&pair[1]));
        }
        let scripts = fake.scripts.lock().unwrap();
        assert!(
            !scripts[2].contains("10.244.0.2 . 10.244.0.2"),
            "api still needs the shared hairpin pair: {}",
            scripts[2]
        );
        assert!(
            scripts[3].contains("delete element ip kube-proxy hairpin { 10.244.0.3 . 10.244.0.3 }"),
            "{}",
            scripts[3]
        );
        // `api` goes as `web` takes 10.244.0.2 back: the pair changes owner, not value.
        assert!(
            !scripts[4].contains("10.244.0.2 . 10.244.0.2"),
            "{}",
            scripts[4]
        );
    }

    #[test]
    fn syncer_is_full_again_when_due() {
        let fake = Arc::new(FakeNft::default());
        let mut syncer = Syncer::new(fake.clone(), Duration::ZERO);
        let state = state("10.96.0.1");
        assert_eq!(syncer.sync_state(&state).unwrap(), SyncKind::Full);
        assert_eq!(syncer.sync_state(&state).unwrap(), SyncKind::Full);
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
        let first = state("10.96.0.1");
        let second = state("10.96.0.2");
        assert_eq!(syncer.sync_state(&first).unwrap(), SyncKind::Full);
        *switch.failing.lock().unwrap() = true;
        assert!(syncer.sync_state(&second).is_err());
        *switch.failing.lock().unwrap() = false;
        assert_eq!(syncer.sync_state(&second).unwrap(), SyncKind::Full);
        assert_eq!(
            switch.fake.scripts.lock().unwrap()[1],
            render_ruleset(&second).to_script()
        );
    }
}
