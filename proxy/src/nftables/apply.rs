//! The kernel side: every sync is one `nft -f -` transaction, so the kernel never holds half a
//! ruleset. Behind a trait so tests use a recording fake, and a command prefix so tests run
//! everything inside a network namespace (`ip netns exec NS`).

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// A full sync recreates the table, which also forgets the clients remembered for session
/// affinity: one more reason to do it only hourly.
pub use crate::iptables::FULL_SYNC_PERIOD;

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

/// The objects the previous sync saw, by `Arc` address (the reflector hands out the same `Arc`
/// while an object is unchanged), as upstream's change trackers: a sync looks only at the
/// Services whose Service or EndpointSlices were added, replaced or removed since, instead of
/// comparing all of them. The `Arc`s are held, so no new object can reuse a remembered address.
#[derive(Default)]
struct Inputs {
    /// Bumped by every [`Inputs::update`]; entries not marked with it are gone.
    generation: u64,
    services: HashMap<usize, (u64, ServiceKey, Arc<Service>)>,
    /// With the Service a slice belongs to, if it names one.
    slices: HashMap<usize, (u64, Option<ServiceKey>, Arc<EndpointSlice>)>,
    by_key: HashMap<ServiceKey, Arc<Service>>,
    slices_by_key: HashMap<ServiceKey, Vec<Arc<EndpointSlice>>>,
}

impl Inputs {
    /// Takes this sync's objects; returns the Services whose inputs changed (or went).
    fn update(
        &mut self,
        services: &[Arc<Service>],
        slices: &[Arc<EndpointSlice>],
    ) -> BTreeSet<ServiceKey> {
        self.generation += 1;
        let generation = self.generation;
        let mut changed = BTreeSet::new();
        for svc in services {
            let address = Arc::as_ptr(svc) as usize;
            if let Some(entry) = self.services.get_mut(&address) {
                entry.0 = generation;
                continue;
            }
            let key = service_key(svc);
            self.by_key.insert(key.clone(), svc.clone());
            changed.insert(key.clone());
            self.services
                .insert(address, (generation, key, svc.clone()));
        }
        let by_key = &mut self.by_key;
        self.services.retain(|_, (seen, key, svc)| {
            if *seen == generation {
                return true;
            }
            changed.insert(key.clone());
            // Unless a new object under the same name took its place already.
            if by_key.get(key).is_some_and(|s| Arc::ptr_eq(s, svc)) {
                by_key.remove(key);
            }
            false
        });

        for slice in slices {
            let address = Arc::as_ptr(slice) as usize;
            if let Some(entry) = self.slices.get_mut(&address) {
                entry.0 = generation;
                continue;
            }
            let owner = slice_owner(slice);
            if let Some(key) = &owner {
                self.slices_by_key
                    .entry(key.clone())
                    .or_default()
                    .push(slice.clone());
                changed.insert(key.clone());
            }
            self.slices
                .insert(address, (generation, owner, slice.clone()));
        }
        let slices_by_key = &mut self.slices_by_key;
        self.slices.retain(|address, (seen, owner, _)| {
            if *seen == generation {
                return true;
            }
            if let Some(key) = owner {
                changed.insert(key.clone());
                if let Some(own) = slices_by_key.get_mut(key) {
                    own.retain(|s| Arc::as_ptr(s) as usize != *address);
                    if own.is_empty() {
                        slices_by_key.remove(key);
                    }
                }
            }
            false
        });
        changed
    }
}

/// The Service an EndpointSlice belongs to: its namespace and service-name label.
fn slice_owner(slice: &EndpointSlice) -> Option<ServiceKey> {
    let ns = slice.metadata.namespace.as_deref()?;
    let svc = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some((ns.to_string(), svc.clone()))
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
    inputs: Inputs,
    /// Which Services put each map or set element in, in key order: the first one's value is
    /// in the kernel (two Services may share an element, e.g. an endpoint's hairpin pair).
    owners: HashMap<(&'static str, String), BTreeSet<ServiceKey>>,
    in_kernel: bool,
    last_full: Option<Instant>,
    metrics: Option<Arc<crate::metrics::ProxyMetrics>>,
}

impl Syncer {
    pub fn new(nft: Arc<dyn Nft>, full_every: Duration) -> Syncer {
        Syncer {
            nft,
            full_every,
            config: None,
            services: BTreeMap::new(),
            inputs: Inputs::default(),
            owners: HashMap::new(),
            in_kernel: false,
            last_full: None,
            metrics: None,
        }
    }

    /// Failed syncs are counted in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::ProxyMetrics>) -> Syncer {
        self.metrics = Some(metrics);
        self
    }

    /// `nft` with `script`, a failure counted.
    fn run(&self, script: &str) -> Result<(), Error> {
        let result = self.nft.run(script);
        if let (Err(_), Some(m)) = (&result, &self.metrics) {
            m.nftables_sync_failed();
        }
        result
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
            self.inputs = Inputs::default();
            self.owners.clear();
            self.in_kernel = false;
        }
        // The Services to re-render or remove, with their new piece.
        let mut dirty: Vec<(ServiceKey, Option<Rendered>)> = Vec::new();
        for key in self.inputs.update(services, slices) {
            let svc = self.inputs.by_key.get(&key).filter(|s| !is_headless(s));
            let Some(svc) = svc else {
                if self.services.contains_key(&key) {
                    dirty.push((key, None));
                }
                continue;
            };
            let mut own: Vec<&Arc<EndpointSlice>> = self
                .inputs
                .slices_by_key
                .get(&key)
                .map(|v| v.iter().collect())
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
                self.run(&script)?;
                SyncKind::Partial
            }
            Plan::Full => {
                self.run(&self.ruleset().to_script())?;
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

    /// As the proxier calls it: the reflector's `Arc`s, one replaced, added or removed per
    /// change; each sync sends what a diff of the whole tables would.
    #[test]
    fn shared_objects_are_tracked_by_address() {
        let fake = Arc::new(FakeNft::default());
        let mut syncer = Syncer::new(fake.clone(), FULL_SYNC_PERIOD);
        let mut prev = two_services(&["10.244.0.2"], true);
        let config = prev.config.clone();
        let mut services: Vec<Arc<Service>> = prev.services.iter().cloned().map(Arc::new).collect();
        let mut slices: Vec<Arc<EndpointSlice>> =
            prev.slices.iter().cloned().map(Arc::new).collect();
        assert_eq!(
            syncer.sync(&config, &services, &slices).unwrap(),
            SyncKind::Full
        );
        assert_eq!(
            syncer.sync(&config, &services, &slices).unwrap(),
            SyncKind::Unchanged
        );
        // An equal object at a new address (a resync): compared by value, nothing to send.
        services[0] = Arc::new((*services[0]).clone());
        assert_eq!(
            syncer.sync(&config, &services, &slices).unwrap(),
            SyncKind::Unchanged
        );

        let mut check = |services: &[Arc<Service>], slices: &[Arc<EndpointSlice>], what: &str| {
            let next = ProxyState {
                config: config.clone(),
                services: services.iter().map(|s| (**s).clone()).collect(),
                slices: slices.iter().map(|s| (**s).clone()).collect(),
            };
            assert_eq!(
                syncer.sync(&config, services, slices).unwrap(),
                SyncKind::Partial,
                "{what}"
            );
            let sent = fake.scripts.lock().unwrap().last().cloned().unwrap();
            assert_eq!(
                Plan::Partial(sent),
                partial_script(&render_ruleset(&prev), &render_ruleset(&next)),
                "{what}"
            );
            prev = next;
        };
        let wider = two_services(&["10.244.0.2", "10.244.0.3"], true);
        slices[0] = Arc::new(wider.slices[0].clone());
        check(&services, &slices, "web's slice replaced");
        let api_slice = slices.pop().unwrap();
        check(&services, &slices, "api's slice removed");
        let api = services.pop().unwrap();
        check(&services, &slices, "api removed");
        services.push(Arc::new((*api).clone()));
        slices.push(Arc::new((*api_slice).clone()));
        check(&services, &slices, "api back under a new address");
        services.swap(0, 1);
        slices.swap(0, 1);
        assert_eq!(
            syncer.sync(&config, &services, &slices).unwrap(),
            SyncKind::Unchanged,
            "order does not matter"
        );
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
        let metrics = Arc::new(crate::metrics::ProxyMetrics::new(
            crate::metrics::Mode::Nftables,
            Duration::from_secs(60),
        ));
        let mut syncer =
            Syncer::new(switch.clone(), FULL_SYNC_PERIOD).with_metrics(metrics.clone());
        let first = state("10.96.0.1");
        let second = state("10.96.0.2");
        assert_eq!(syncer.sync_state(&first).unwrap(), SyncKind::Full);
        *switch.failing.lock().unwrap() = true;
        assert!(syncer.sync_state(&second).is_err());
        assert!(
            metrics
                .render()
                .contains("\nkubeproxy_sync_proxy_rules_nftables_sync_failures_total 1\n")
        );
        *switch.failing.lock().unwrap() = false;
        assert_eq!(syncer.sync_state(&second).unwrap(), SyncKind::Full);
        assert_eq!(
            switch.fake.scripts.lock().unwrap()[1],
            render_ruleset(&second).to_script()
        );
    }
}
