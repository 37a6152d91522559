//! A kube-rs program against the cluster: watcher and reflector, a Controller over a
//! `#[derive(CustomResource)]` kind it installs first, the finalizer helper (JSON Patch with
//! `test` ops), and server-side apply with field managers.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{conditions, wait::await_condition, watcher};
use kube::{Api, CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::Env;
use crate::support::{self, CaseFn, eventually, gone};

/// The custom kind of this suite. Its CustomResourceDefinition is installed by the
/// `crd-established` case and removed by `crd-delete`.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "conformance.minik8s.io",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus",
    shortname = "gdt",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GadgetSpec {
    pub size: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GadgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_size: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
}

const CRD_NAME: &str = "gadgets.conformance.minik8s.io";

pub const CASES: &[(&str, CaseFn<Ctx>)] = crate::cases! { Ctx;
    "watcher-reflector" => watcher_reflector,
    "watcher-streaming-list" => watcher_streaming_list,
    "crd-established" => crd_established,
    "crd-crud" => crd_crud,
    "controller" => controller,
    "finalizer" => finalizer_helper,
    "server-side-apply" => server_side_apply,
    "server-side-apply-crd" => server_side_apply_crd,
    "crd-delete" => crd_delete,
    "in-cluster" => in_cluster,
};

pub struct Ctx {
    client: kube::Client,
    ns: String,
}

pub async fn run(env: &Arc<Env>) {
    let ns = format!("conf-kube-{}", env.run);
    let ctx = Ctx {
        client: env.client.clone(),
        ns,
    };
    if let Err(e) = support::create_namespace(&ctx.client, &ctx.ns).await {
        support::fail_set_up("kube-rs", CASES, &env.selection, &env.report, &e);
        return;
    }
    support::run_cases(
        "kube-rs",
        &ctx,
        CASES,
        &env.selection,
        &env.report,
        Duration::from_secs(90),
    )
    .await;
    support::remove_namespace(&ctx.client, &ctx.ns, &[ApiResource::erase::<Gadget>(&())]).await;
}

impl Ctx {
    /// Fails with a clear reason unless the Gadget kind is served.
    async fn gadgets_served(&self) -> anyhow::Result<Api<Gadget>> {
        let api = self.gadgets();
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => Ok(api),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                bail!("{CRD_NAME} is not served (HTTP 404 listing gadgets; see crd-established)")
            }
            Err(e) => Err(e).context("listing gadgets"),
        }
    }

    fn cms(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn gadgets(&self) -> Api<Gadget> {
        Api::namespaced(self.client.clone(), &self.ns)
    }
}

fn configmap(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()
        },
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()
    }))
    .expect("a valid ConfigMap")
}

/// Records what a background stream saw, for assertions and failure messages.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, s: impl Into<String>) {
        self.0.lock().expect("log lock").push(s.into());
    }
    fn get(&self) -> Vec<String> {
        self.0.lock().expect("log lock").clone()
    }
    fn errors(&self) -> Vec<String> {
        self.get()
            .into_iter()
            .filter(|l| l.starts_with("error"))
            .collect()
    }
}

fn describe(ev: &watcher::Event<ConfigMap>) -> String {
    match ev {
        watcher::Event::Init => "Init".into(),
        watcher::Event::InitApply(o) => format!("InitApply {}", o.name_any()),
        watcher::Event::InitDone => "InitDone".into(),
        watcher::Event::Apply(o) => format!("Apply {}", o.name_any()),
        watcher::Event::Delete(o) => format!("Delete {}", o.name_any()),
    }
}

/// Fails unless `want` occurs in `log` in this order (other entries may come between).
fn in_order(log: &[String], want: &[&str]) -> anyhow::Result<()> {
    let mut it = log.iter();
    for w in want {
        ensure!(
            it.any(|l| l == w),
            "expected events {want:?} in order, saw {log:?}"
        );
    }
    Ok(())
}

/// Starts a reflector over ConfigMaps with `label`; returns its store, its event log, and
/// the task to abort.
fn start_reflector(
    api: Api<ConfigMap>,
    config: watcher::Config,
) -> (Store<ConfigMap>, Log, tokio::task::JoinHandle<()>) {
    let (reader, writer) = reflector::store();
    let log = Log::default();
    let l = log.clone();
    let task = tokio::spawn(async move {
        let mut stream = pin!(reflector::reflector(writer, watcher(api, config)));
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => l.push(describe(&ev)),
                Err(e) => l.push(format!("error: {}", support::error_text(&e))),
            }
        }
    });
    (reader, log, task)
}

fn store_data(store: &Store<ConfigMap>) -> BTreeMap<String, BTreeMap<String, String>> {
    store
        .state()
        .iter()
        .map(|c| (c.name_any(), c.data.clone().unwrap_or_default()))
        .collect()
}

async fn reflect_and_check(c: &Ctx, config: watcher::Config, label: &str) -> anyhow::Result<()> {
    let cms = c.cms();
    let pre = format!("{label}-pre");
    let added = format!("{label}-added");
    cms.create(
        &PostParams::default(),
        &configmap(&pre, &[("suite", label)], &[("v", "1")]),
    )
    .await?;
    // Not selected: must never show up.
    cms.create(
        &PostParams::default(),
        &configmap(&format!("{label}-other"), &[], &[]),
    )
    .await?;
    let (store, log, task) = start_reflector(cms.clone(), config.labels(&format!("suite={label}")));
    let result = async {
        tokio::time::timeout(Duration::from_secs(10), store.wait_until_ready())
            .await
            .map_err(|_| anyhow!("store not ready within 10 s; events {:?}", log.get()))??;
        let want = |pairs: &[(&str, &str)]| -> BTreeMap<String, BTreeMap<String, String>> {
            pairs
                .iter()
                .map(|(n, v)| {
                    (
                        n.to_string(),
                        BTreeMap::from([("v".to_string(), v.to_string())]),
                    )
                })
                .collect()
        };
        ensure!(
            store_data(&store) == want(&[(&pre, "1")]),
            "initial store {:?}",
            store_data(&store)
        );
        cms.create(
            &PostParams::default(),
            &configmap(&added, &[("suite", label)], &[("v", "a")]),
        )
        .await?;
        eventually(
            Duration::from_secs(10),
            "store sees the added object",
            || async {
                let got = store_data(&store);
                ensure!(got == want(&[(&pre, "1"), (&added, "a")]), "store {got:?}");
                Ok(())
            },
        )
        .await?;
        cms.patch(
            &pre,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await?;
        eventually(Duration::from_secs(10), "store sees the update", || async {
            let got = store_data(&store);
            ensure!(got == want(&[(&pre, "2"), (&added, "a")]), "store {got:?}");
            Ok(())
        })
        .await?;
        cms.delete(&added, &DeleteParams::default()).await?;
        eventually(Duration::from_secs(10), "store sees the delete", || async {
            let got = store_data(&store);
            ensure!(got == want(&[(&pre, "2")]), "store {got:?}");
            Ok(())
        })
        .await?;
        let events = log.get();
        in_order(
            &events,
            &[
                "Init",
                &format!("InitApply {pre}"),
                "InitDone",
                &format!("Apply {added}"),
                &format!("Apply {pre}"),
                &format!("Delete {added}"),
            ],
        )?;
        ensure!(
            !events.iter().any(|e| e.contains(&format!("{label}-other"))),
            "an object outside the selector was delivered: {events:?}"
        );
        ensure!(log.errors().is_empty(), "watch errors: {:?}", log.errors());
        Ok(())
    }
    .await;
    task.abort();
    for n in [pre, added, format!("{label}-other")] {
        let _ = cms.delete(&n, &DeleteParams::default()).await;
    }
    result
}

async fn watcher_reflector(c: &Ctx) -> anyhow::Result<()> {
    reflect_and_check(c, watcher::Config::default(), "wr").await
}

/// `sendInitialEvents=true`: the initial state streams as ADDED events and ends with a
/// BOOKMARK annotated `k8s.io/initial-events-end`.
async fn watcher_streaming_list(c: &Ctx) -> anyhow::Result<()> {
    reflect_and_check(c, watcher::Config::default().streaming_lists(), "sl").await
}

/// Installs the Gadget CRD through the API and waits until it is Established and served.
async fn crd_established(c: &Ctx) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
    let crd = Gadget::crd();
    if let Some(old) = crds.get_opt(CRD_NAME).await? {
        if old.metadata.deletion_timestamp.is_some() {
            // Left terminating by an earlier run: take our finalizers off so it can go.
            crds.patch(
                CRD_NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await?;
            eventually(Duration::from_secs(10), "the old CRD is removed", || {
                gone(&crds, CRD_NAME)
            })
            .await?;
            crds.create(&PostParams::default(), &crd).await?;
        } else {
            let mut new = crd.clone();
            new.metadata.resource_version = old.metadata.resource_version;
            crds.replace(CRD_NAME, &PostParams::default(), &new).await?;
        }
    } else {
        crds.create(&PostParams::default(), &crd)
            .await
            .context("creating the CRD")?;
    }
    let established = tokio::time::timeout(
        Duration::from_secs(15),
        await_condition(crds.clone(), CRD_NAME, conditions::is_crd_established()),
    )
    .await;
    if established.is_err() {
        let conds = crds
            .get(CRD_NAME)
            .await?
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default();
        bail!(
            "CRD not Established within 15 s; conditions {:?}",
            conds
                .iter()
                .map(|c| format!("{}={}", c.type_, c.status))
                .collect::<Vec<_>>()
        );
    }
    let stored = crds.get(CRD_NAME).await?;
    let names = stored
        .status
        .as_ref()
        .and_then(|s| s.accepted_names.clone());
    ensure!(
        names.as_ref().map(|n| n.kind.as_str()) == Some("Gadget")
            && names.as_ref().map(|n| n.plural.as_str()) == Some("gadgets"),
        "status.acceptedNames: {names:?}"
    );
    // Served: discovery lists it, with its status subresource.
    eventually(
        Duration::from_secs(10),
        "discovery lists gadgets",
        || async {
            let discovery = kube::Discovery::new(c.client.clone())
                .filter(&["conformance.minik8s.io"])
                .run()
                .await?;
            let (ar, caps) = discovery
                .resolve_gvk(&kube::core::GroupVersionKind::gvk(
                    "conformance.minik8s.io",
                    "v1",
                    "Gadget",
                ))
                .context("Gadget not in discovery")?;
            ensure!(ar.plural == "gadgets", "plural {}", ar.plural);
            ensure!(
                caps.scope == kube::discovery::Scope::Namespaced,
                "scope {:?}",
                caps.scope
            );
            ensure!(
                caps.subresources
                    .iter()
                    .any(|(s, _)| s.plural == "gadgets/status" || s.plural == "status"),
                "no status subresource in discovery"
            );
            Ok(())
        },
    )
    .await?;
    c.gadgets()
        .list(&ListParams::default())
        .await
        .context("listing gadgets")?;
    Ok(())
}

async fn crd_crud(c: &Ctx) -> anyhow::Result<()> {
    let api = c.gadgets_served().await?;
    let _ = api.delete("crud", &DeleteParams::default()).await;
    let mut g = Gadget::new(
        "crud",
        GadgetSpec {
            size: 1,
            color: Some("blue".into()),
        },
    );
    g.status = Some(GadgetStatus {
        observed_size: Some(99),
        config_map: None,
    });
    let created = api.create(&PostParams::default(), &g).await?;
    ensure!(
        created
            .status
            .as_ref()
            .is_none_or(|s| s == &GadgetStatus::default()),
        "status given on create must be dropped with a status subresource: {:?}",
        created.status
    );
    ensure!(
        created.metadata.generation == Some(1),
        "generation {:?}",
        created.metadata.generation
    );
    ensure!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let list = api.list(&ListParams::default()).await?;
    ensure!(
        list.items.iter().any(|g| g.name_any() == "crud"),
        "not listed"
    );
    let mut updated = api.get("crud").await?;
    updated.spec.size = 2;
    let updated = api
        .replace("crud", &PostParams::default(), &updated)
        .await?;
    ensure!(
        updated.metadata.generation == Some(2),
        "a spec change must bump generation"
    );
    let with_status = api
        .patch_status(
            "crud",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedSize": 2}})),
        )
        .await?;
    ensure!(
        with_status.status.as_ref().and_then(|s| s.observed_size) == Some(2)
            && with_status.metadata.generation == Some(2),
        "status patch: {:?} generation {:?}",
        with_status.status,
        with_status.metadata.generation
    );
    // The main resource ignores status.
    let mut again = with_status.clone();
    again.status = Some(GadgetStatus {
        observed_size: Some(7),
        config_map: None,
    });
    again.spec.color = Some("green".into());
    let again = api.replace("crud", &PostParams::default(), &again).await?;
    ensure!(
        again.status.as_ref().and_then(|s| s.observed_size) == Some(2),
        "an update of the main resource changed status"
    );
    // Schema validation.
    let dynamic: Api<DynamicObject> =
        Api::namespaced_with(c.client.clone(), &c.ns, &ApiResource::erase::<Gadget>(&()));
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "conformance.minik8s.io/v1", "kind": "Gadget",
        "metadata": {"name": "bad"}, "spec": {"size": "big"}
    }))?;
    match dynamic.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) if s.code == 422 => {
            ensure!(s.message.contains("spec.size"), "message: {}", s.message)
        }
        other => bail!(
            "a Gadget with spec.size \"big\" was not rejected with 422: {:?}",
            other.map(|o| o.metadata.name)
        ),
    }
    api.delete("crud", &DeleteParams::default()).await?;
    eventually(Duration::from_secs(5), "deleted", || gone(&api, "crud")).await
}

#[derive(Debug)]
struct ReconcileError(String);

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReconcileError {}

impl From<kube::Error> for ReconcileError {
    fn from(e: kube::Error) -> Self {
        ReconcileError(e.to_string())
    }
}

struct Reconciler {
    gadgets: Api<Gadget>,
    cms: Api<ConfigMap>,
}

/// Keeps a ConfigMap `<name>-cfg`, owned by the Gadget, holding its size, and reports what
/// it saw in status.
async fn reconcile(g: Arc<Gadget>, ctx: Arc<Reconciler>) -> Result<Action, ReconcileError> {
    let name = g.name_any();
    let cm_name = format!("{name}-cfg");
    let size = g.spec.size.to_string();
    let owner = g
        .controller_owner_ref(&())
        .ok_or_else(|| ReconcileError("no owner reference".into()))?;
    match ctx.cms.get_opt(&cm_name).await? {
        None => {
            let mut cm = configmap(&cm_name, &[("gadget", &name)], &[("size", &size)]);
            cm.metadata.owner_references = Some(vec![owner]);
            ctx.cms.create(&PostParams::default(), &cm).await?;
        }
        Some(cm) if cm.data.as_ref().and_then(|d| d.get("size")) != Some(&size) => {
            ctx.cms
                .patch(
                    &cm_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"size": size}})),
                )
                .await?;
        }
        Some(_) => {}
    }
    ctx.gadgets
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedSize": g.spec.size, "configMap": cm_name}})),
        )
        .await?;
    Ok(Action::await_change())
}

async fn controller(c: &Ctx) -> anyhow::Result<()> {
    let gadgets = c.gadgets_served().await?;
    let cms = c.cms();
    let state = Arc::new(Reconciler {
        gadgets: gadgets.clone(),
        cms: cms.clone(),
    });
    let log = Log::default();
    let l = log.clone();
    let task = tokio::spawn(
        Controller::new(gadgets.clone(), watcher::Config::default())
            .owns(cms.clone(), watcher::Config::default().labels("gadget"))
            .run(
                reconcile,
                |_, _, _| Action::requeue(Duration::from_millis(300)),
                state,
            )
            .for_each(move |r| {
                match r {
                    Ok((obj, _)) => l.push(format!("reconciled {}", obj.name)),
                    Err(e) => l.push(format!("error: {}", support::error_text(&e))),
                }
                futures::future::ready(())
            }),
    );
    let result = async {
        gadgets
            .create(
                &PostParams::default(),
                &Gadget::new(
                    "ctl",
                    GadgetSpec {
                        size: 3,
                        color: None,
                    },
                ),
            )
            .await?;
        let uid = gadgets.get("ctl").await?.metadata.uid.context("uid")?;
        let check = |want: i32| {
            let gadgets = gadgets.clone();
            let cms = cms.clone();
            let uid = uid.clone();
            let log = log.clone();
            async move {
                let g = gadgets.get("ctl").await?;
                let status = g.status.clone().unwrap_or_default();
                ensure!(
                    status.observed_size == Some(want),
                    "status {status:?}; controller log {:?}",
                    log.get()
                );
                let cm = cms.get("ctl-cfg").await?;
                ensure!(
                    cm.data.as_ref().and_then(|d| d.get("size")) == Some(&want.to_string()),
                    "ConfigMap data {:?}",
                    cm.data
                );
                let owners = cm.metadata.owner_references.unwrap_or_default();
                ensure!(
                    owners.len() == 1 && owners[0].uid == uid && owners[0].controller == Some(true),
                    "ownerReferences {owners:?}"
                );
                anyhow::Ok(cm.metadata.uid)
            }
        };
        eventually(Duration::from_secs(15), "first reconcile", || check(3)).await?;
        gadgets
            .patch(
                "ctl",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"size": 5}})),
            )
            .await?;
        let cm_uid = eventually(
            Duration::from_secs(15),
            "reconcile after a spec change",
            || check(5),
        )
        .await?;
        // Deleting the owned ConfigMap triggers a reconcile through `owns`.
        cms.delete("ctl-cfg", &DeleteParams::default()).await?;
        let new_uid = eventually(
            Duration::from_secs(15),
            "owned ConfigMap recreated",
            || async {
                let uid = check(5).await?;
                ensure!(uid != cm_uid, "still the old ConfigMap");
                Ok(uid)
            },
        )
        .await?;
        ensure!(new_uid.is_some());
        Ok(())
    }
    .await;
    task.abort();
    let _ = gadgets.delete("ctl", &DeleteParams::default()).await;
    let _ = cms.delete("ctl-cfg", &DeleteParams::default()).await;
    result
}

const FINALIZER: &str = "conformance.minik8s.io/cleanup";

async fn finalizer_helper(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.cms();
    let log = Log::default();
    let seen = log.clone();
    let api = cms.clone();
    let task = tokio::spawn(
        Controller::new(cms.clone(), watcher::Config::default().labels("fin=yes"))
            .run(
                move |cm: Arc<ConfigMap>, _ctx: Arc<()>| {
                    let api = api.clone();
                    let seen = seen.clone();
                    async move {
                        finalizer(&api, FINALIZER, cm, |ev| async move {
                            match ev {
                                finalizer::Event::Apply(o) => {
                                    seen.push(format!("apply {}", o.name_any()))
                                }
                                finalizer::Event::Cleanup(o) => {
                                    seen.push(format!("cleanup {}", o.name_any()))
                                }
                            }
                            Ok::<_, ReconcileError>(Action::await_change())
                        })
                        .await
                    }
                },
                |_, _, _| Action::requeue(Duration::from_millis(300)),
                Arc::new(()),
            )
            .for_each({
                let log = log.clone();
                move |r| {
                    if let Err(e) = r {
                        log.push(format!("error: {}", support::error_text(&e)));
                    }
                    futures::future::ready(())
                }
            }),
    );
    let finalizers = |name: &'static str| {
        let cms = cms.clone();
        async move { anyhow::Ok(cms.get(name).await?.metadata.finalizers.unwrap_or_default()) }
    };
    let result = async {
        // No finalizers yet: the helper adds the first (test /metadata/finalizers is null).
        cms.create(
            &PostParams::default(),
            &configmap("fin-1", &[("fin", "yes")], &[]),
        )
        .await?;
        // One finalizer already: the helper appends (test the whole list, add at /-).
        let mut other = configmap("fin-2", &[("fin", "yes")], &[]);
        other.metadata.finalizers = Some(vec!["other.example.com/keep".into()]);
        cms.create(&PostParams::default(), &other).await?;
        eventually(
            Duration::from_secs(15),
            "finalizers added and Apply run",
            || async {
                let f1 = finalizers("fin-1").await?;
                let f2 = finalizers("fin-2").await?;
                ensure!(
                    f1 == [FINALIZER]
                        && f2 == ["other.example.com/keep", FINALIZER]
                        && log.get().contains(&"apply fin-1".to_string())
                        && log.get().contains(&"apply fin-2".to_string()),
                    "finalizers {f1:?} {f2:?}; log {:?}",
                    log.get()
                );
                Ok(())
            },
        )
        .await?;
        cms.delete("fin-1", &DeleteParams::default()).await?;
        eventually(
            Duration::from_secs(15),
            "Cleanup run and fin-1 removed",
            || async {
                gone(&cms, "fin-1").await?;
                ensure!(
                    log.get().contains(&"cleanup fin-1".to_string()),
                    "log {:?}",
                    log.get()
                );
                Ok(())
            },
        )
        .await
        .with_context(|| format!("log {:?}", log.get()))?;
        cms.delete("fin-2", &DeleteParams::default()).await?;
        eventually(
            Duration::from_secs(15),
            "our finalizer removed, the other kept",
            || async {
                let f2 = finalizers("fin-2").await?;
                ensure!(
                    f2 == ["other.example.com/keep"]
                        && log.get().contains(&"cleanup fin-2".to_string()),
                    "finalizers {f2:?}; log {:?}",
                    log.get()
                );
                Ok(())
            },
        )
        .await?;
        cms.patch(
            "fin-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
        eventually(Duration::from_secs(5), "fin-2 removed", || {
            gone(&cms, "fin-2")
        })
        .await?;
        Ok(())
    }
    .await;
    task.abort();
    result
}

fn owners_of(
    cm_fields: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
    pointer: &str,
) -> Vec<String> {
    cm_fields
        .iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer(pointer).is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}

async fn server_side_apply(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.cms();
    let _ = cms.delete("ssa", &DeleteParams::default()).await;
    let body = |data: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ssa", "labels": {"by": "a"}}, "data": data})
    };
    let created = cms
        .patch(
            "ssa",
            &PatchParams::apply("conf-a"),
            &Patch::Apply(body(json!({"a": "1", "b": "2"}))),
        )
        .await
        .context("apply that creates")?;
    let fields = created.metadata.managed_fields.clone().unwrap_or_default();
    let entry = fields
        .iter()
        .find(|m| m.manager.as_deref() == Some("conf-a"))
        .with_context(|| format!("no managedFields entry for conf-a: {fields:?}"))?;
    ensure!(
        entry.operation.as_deref() == Some("Apply")
            && entry.fields_type.as_deref() == Some("FieldsV1")
            && entry.api_version.as_deref() == Some("v1"),
        "entry {entry:?}"
    );
    ensure!(
        owners_of(&fields, "/f:data/f:a") == ["conf-a"]
            && owners_of(&fields, "/f:metadata/f:labels/f:by") == ["conf-a"],
        "fieldsV1 {:?}",
        entry.fields_v1
    );
    // Another manager setting the same field to another value conflicts.
    match cms
        .patch("ssa", &PatchParams::apply("conf-b"), &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "9"}
        })))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 409 => {
            ensure!(s.reason == "Conflict", "reason {}", s.reason);
            ensure!(s.message.contains("conflict with \"conf-a\""), "message {}", s.message);
        }
        other => bail!(
            "a conflicting apply was not refused with 409: {:?}",
            other.map(|o| o.data)
        ),
    }
    // Forced, it takes the field over.
    let forced = cms
        .patch("ssa", &PatchParams::apply("conf-b").force(), &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "9"}
        })))
        .await?;
    let fields = forced.metadata.managed_fields.clone().unwrap_or_default();
    ensure!(
        forced
            .data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str)
            == Some("9")
            && owners_of(&fields, "/f:data/f:a") == ["conf-b"],
        "after force: data {:?}, owners of a {:?}",
        forced.data,
        owners_of(&fields, "/f:data/f:a")
    );
    // conf-a drops b from its config: b goes; a stays, conf-b owns it.
    let after = cms
        .patch("ssa", &PatchParams::apply("conf-a"), &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": {"by": "a"}}
        })))
        .await?;
    let data = after.data.clone().unwrap_or_default();
    ensure!(
        data == BTreeMap::from([("a".to_string(), "9".to_string())]),
        "after conf-a dropped b: {data:?}"
    );
    // Dry run answers with the result and stores nothing.
    let dry = cms
        .patch("ssa", &PatchParams::apply("conf-c").dry_run(), &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"c": "3"}
        })))
        .await?;
    ensure!(
        dry.data.as_ref().is_some_and(|d| d.contains_key("c")),
        "dry run result {:?}",
        dry.data
    );
    ensure!(
        !cms.get("ssa")
            .await?
            .data
            .unwrap_or_default()
            .contains_key("c"),
        "dry run stored"
    );
    // An apply without a field manager is refused: PatchOptions are invalid.
    match cms
        .patch(
            "ssa",
            &PatchParams::default(),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}
            })),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("fieldManager") => {}
        other => bail!(
            "apply without fieldManager: want 422 \"fieldManager: Required value\", got {}",
            match other {
                Ok(o) => format!("success {:?}", o.data),
                Err(e) => support::error_text(&e),
            }
        ),
    }
    cms.delete("ssa", &DeleteParams::default()).await?;
    Ok(())
}

async fn server_side_apply_crd(c: &Ctx) -> anyhow::Result<()> {
    let api = c.gadgets_served().await?;
    let _ = api.delete("ssa", &DeleteParams::default()).await;
    let spec = |size: i32, color: Option<&str>| {
        let mut g = Gadget::new(
            "ssa",
            GadgetSpec {
                size,
                color: color.map(String::from),
            },
        );
        g.metadata.managed_fields = None;
        serde_json::to_value(g).expect("a Gadget serializes")
    };
    api.patch(
        "ssa",
        &PatchParams::apply("conf-spec"),
        &Patch::Apply(spec(1, Some("red"))),
    )
    .await
    .context("apply that creates a Gadget")?;
    let status = api
        .patch_status(
            "ssa",
            &PatchParams::apply("conf-status"),
            &Patch::Apply(json!({
                "apiVersion": "conformance.minik8s.io/v1", "kind": "Gadget",
                "metadata": {"name": "ssa"}, "status": {"observedSize": 1}
            })),
        )
        .await
        .context("apply to the status subresource")?;
    ensure!(
        status.status.as_ref().and_then(|s| s.observed_size) == Some(1),
        "status {:?}",
        status.status
    );
    let fields = status.metadata.managed_fields.clone().unwrap_or_default();
    let status_entry = fields
        .iter()
        .find(|m| m.manager.as_deref() == Some("conf-status"))
        .context("no managedFields entry for conf-status")?;
    ensure!(
        status_entry.subresource.as_deref() == Some("status")
            && owners_of(&fields, "/f:status/f:observedSize") == ["conf-status"]
            && owners_of(&fields, "/f:spec/f:size") == ["conf-spec"],
        "managedFields {fields:?}"
    );
    let after = api
        .patch(
            "ssa",
            &PatchParams::apply("conf-spec"),
            &Patch::Apply(spec(2, None)),
        )
        .await?;
    ensure!(
        after.spec.size == 2 && after.spec.color.is_none(),
        "a field dropped from the applied config must go: {:?}",
        after.spec
    );
    ensure!(
        after.status.as_ref().and_then(|s| s.observed_size) == Some(1),
        "status lost: {:?}",
        after.status
    );
    api.delete("ssa", &DeleteParams::default()).await?;
    Ok(())
}

/// Deleting the CRD removes its objects and then the CRD.
async fn crd_delete(c: &Ctx) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
    let served = c.gadgets_served().await;
    if let Ok(api) = &served {
        api.create(
            &PostParams::default(),
            &Gadget::new(
                "leftover",
                GadgetSpec {
                    size: 1,
                    color: None,
                },
            ),
        )
        .await
        .context("creating a Gadget to be cleaned up with the CRD")?;
    }
    // Deleted even when the kind was never served, so no run leaves it behind.
    match crds.delete(CRD_NAME, &DeleteParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        other => {
            other?;
        }
    }
    let api = served?;
    eventually(Duration::from_secs(20), "the CRD is removed", || {
        gone(&crds, CRD_NAME)
    })
    .await?;
    // As upstream, the server stops serving the kind when its CRD watch sees the CRD go,
    // a moment after the CRD is gone from storage.
    eventually(
        Duration::from_secs(10),
        "gadgets no longer served after the CRD is gone",
        || async {
            match api.list(&ListParams::default()).await {
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                other => Err(anyhow!(
                    "gadgets still served after the CRD is gone: {:?}",
                    other.map(|l| l.items.len())
                )),
            }
        },
    )
    .await
}

/// This program, run in a pod, finds the API through `kubernetes.default.svc` with the
/// credentials ServiceAccount admission mounted (see `incluster`).
async fn in_cluster(c: &Ctx) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let exe = exe.to_string_lossy();
    let pod = crate::incluster::pod(
        "kube-rs-incluster",
        &[
            "/probe",
            "in-cluster",
            "--namespace",
            &c.ns,
            "--config-map",
            "kube-rs-incluster",
        ],
        &[("RUST_LOG", "warn")],
        &[(&exe, "/probe")],
    );
    let log = crate::incluster::run(&c.client, &c.ns, pod, "kube-rs-incluster").await?;
    ensure!(
        log.contains("server https://kubernetes.default.svc"),
        "not through kubernetes.default.svc: {log:?}"
    );
    let pods = crate::incluster::listed_pods(&log);
    ensure!(pods.contains(&"kube-rs-incluster"), "listed pods {pods:?}");
    Ok(())
}
