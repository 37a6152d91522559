//! The CronJob and TTL-after-finished controllers against the in-process API server, with the
//! Job controller and hollow nodes running the Jobs, and a fake clock moved instead of
//! waiting for real minutes.

use crate::support;
use minik8s_controllers::informers::Informers;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use minik8s_controllers::cronjob::{self, SCHEDULED_TIMESTAMP};
use minik8s_controllers::hollow::{self, HollowConfig};
use minik8s_controllers::job::{self, JobOptions};
use minik8s_controllers::ttl_after_finished;
use minik8s_controllers::util::clock::FakeClock;
use support::{WAIT, run_binder};
use testkit::{Backend, InProcess, eventually};

struct Cluster {
    _api: InProcess,
    client: Client,
    clock: Arc<FakeClock>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn cluster() -> anyhow::Result<Cluster> {
    testkit::init_tracing();
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let config = HollowConfig {
        count: 2,
        ..Default::default()
    };
    let nodes = config.node_names();
    let clock = Arc::new(FakeClock::new(Timestamp::now()));
    let options = JobOptions {
        pod_failure_backoff: Duration::from_millis(10),
        ..Default::default()
    };
    let tasks = vec![
        tokio::spawn({
            let c = client.clone();
            async move {
                let _ = hollow::run(c, config).await;
            }
        }),
        tokio::spawn(run_binder(client.clone(), nodes)),
        tokio::spawn(job::run_with(Informers::new(client.clone()), options)),
        tokio::spawn(cronjob::run_with(
            Informers::new(client.clone()),
            clock.clone(),
        )),
        tokio::spawn(ttl_after_finished::run(Informers::new(client.clone()))),
    ];
    Ok(Cluster {
        _api: api,
        client,
        clock,
        tasks,
    })
}

fn cronjob(name: &str, spec: serde_json::Value, pod_annotations: serde_json::Value) -> CronJob {
    let mut spec = spec;
    spec["schedule"] = "* * * * *".into();
    spec["jobTemplate"] = serde_json::json!({
        "metadata": {"labels": {"cron": name}},
        "spec": {"template": {
            "metadata": {"annotations": pod_annotations},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.36"}],
            },
        }},
    });
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// Moves the fake clock to one second past the next minute after `from`, and pokes the
/// CronJob so it looks at the clock (in production the requeue at the schedule time does).
async fn next_minute(c: &Cluster, cjs: &Api<CronJob>, name: &str, from: Timestamp) -> Timestamp {
    let minute = (from.as_second().div_euclid(60) + 1) * 60;
    let at = Timestamp::from_second(minute).unwrap();
    c.clock
        .set(at.checked_add(SignedDuration::from_secs(1)).unwrap());
    let touch = serde_json::json!({"metadata": {"annotations": {"test/now": minute.to_string()}}});
    cjs.patch(name, &PatchParams::default(), &Patch::Merge(touch))
        .await
        .unwrap();
    at
}

fn job_name(cj: &str, at: Timestamp) -> String {
    format!("{cj}-{}", at.as_second() / 60)
}

async fn reasons(client: &Client, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

fn complete(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

#[tokio::test]
async fn cronjobs_start_a_job_per_schedule_time_and_keep_history() -> anyhow::Result<()> {
    let c = cluster().await?;
    let cjs: Api<CronJob> = Api::namespaced(c.client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    let created = cjs
        .create(
            &PostParams::default(),
            &cronjob(
                "tick",
                serde_json::json!({"successfulJobsHistoryLimit": 1}),
                serde_json::json!({}),
            ),
        )
        .await?;
    let start = created.metadata.creation_timestamp.unwrap().0;

    let first_at = next_minute(&c, &cjs, "tick", start).await;
    let first = job_name("tick", first_at);
    let job = eventually(WAIT, "the first run", || async {
        jobs.get_opt(&first).await.ok()?
    })
    .await;
    assert_eq!(job.labels()["cron"], "tick");
    assert_eq!(job.owner_references()[0].kind, "CronJob");
    let scheduled: Timestamp = job.annotations()[SCHEDULED_TIMESTAMP].parse()?;
    assert_eq!(scheduled, first_at);
    let status = eventually(WAIT, "the first run finished and seen", || async {
        let s = cjs.get("tick").await.ok()?.status?;
        (s.active.is_none() && s.last_successful_time.is_some()).then_some(s)
    })
    .await;
    assert_eq!(status.last_schedule_time.unwrap().0, first_at);
    assert!(complete(&jobs.get(&first).await?));

    let second_at = next_minute(&c, &cjs, "tick", first_at).await;
    let second = job_name("tick", second_at);
    eventually(WAIT, "the second run complete", || async {
        complete(&jobs.get_opt(&second).await.ok()??).then_some(())
    })
    .await;
    // One successful run is kept: the older one goes.
    eventually(WAIT, "the first run deleted", || async {
        jobs.get_opt(&first).await.ok()?.is_none().then_some(())
    })
    .await;
    let r = eventually(WAIT, "events", || async {
        let r = reasons(&c.client, "tick").await;
        r.contains(&"SawCompletedJob".to_string()).then_some(r)
    })
    .await;
    assert!(r.contains(&"SuccessfulCreate".to_string()));
    Ok(())
}

#[tokio::test]
async fn forbid_skips_runs_and_replace_replaces_them() -> anyhow::Result<()> {
    let c = cluster().await?;
    let cjs: Api<CronJob> = Api::namespaced(c.client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    let long = serde_json::json!({"hollow.minik8s.io/exit-code": "0", "hollow.minik8s.io/run-seconds": "3600"});
    let created = cjs
        .create(
            &PostParams::default(),
            &cronjob(
                "busy",
                serde_json::json!({"concurrencyPolicy": "Forbid"}),
                long,
            ),
        )
        .await?;
    let start = created.metadata.creation_timestamp.unwrap().0;
    let first_at = next_minute(&c, &cjs, "busy", start).await;
    let first = job_name("busy", first_at);
    eventually(WAIT, "the first run active", || async {
        let s = cjs.get("busy").await.ok()?.status?;
        (s.active?.len() == 1).then_some(())
    })
    .await;

    let second_at = next_minute(&c, &cjs, "busy", first_at).await;
    eventually(WAIT, "a JobAlreadyActive event", || async {
        reasons(&c.client, "busy")
            .await
            .contains(&"JobAlreadyActive".to_string())
            .then_some(())
    })
    .await;
    assert!(jobs.get_opt(&job_name("busy", second_at)).await?.is_none());

    let replace = serde_json::json!({"spec": {"concurrencyPolicy": "Replace"}});
    cjs.patch("busy", &PatchParams::default(), &Patch::Merge(replace))
        .await?;
    let third_at = next_minute(&c, &cjs, "busy", second_at).await;
    let third = job_name("busy", third_at);
    let status = eventually(WAIT, "the third run replacing the first", || async {
        let s = cjs.get("busy").await.ok()?.status?;
        let active = s.active.clone()?;
        (active.len() == 1 && active[0].name.as_deref() == Some(third.as_str())).then_some(s)
    })
    .await;
    assert_eq!(status.last_schedule_time.unwrap().0, third_at);
    eventually(WAIT, "the first run deleted", || async {
        jobs.get_opt(&first).await.ok()?.is_none().then_some(())
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn finished_jobs_are_deleted_after_their_ttl() -> anyhow::Result<()> {
    let c = cluster().await?;
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "brief"},
        "spec": {
            "ttlSecondsAfterFinished": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.36"}],
            }},
        },
    }))?;
    let kept: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kept"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox:1.36"}],
        }}},
    }))?;
    jobs.create(&PostParams::default(), &job).await?;
    jobs.create(&PostParams::default(), &kept).await?;
    eventually(WAIT, "kept complete", || async {
        complete(&jobs.get("kept").await.ok()?).then_some(())
    })
    .await;
    eventually(WAIT, "brief deleted", || async {
        jobs.get_opt("brief").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(jobs.get_opt("kept").await?.is_some());
    Ok(())
}
