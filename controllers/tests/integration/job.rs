//! The Job controller against the in-process API server, with hollow nodes running the pods
//! and a test binder standing in for the scheduler.

use crate::support;
use minik8s_controllers::informers::Informers;

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use minik8s_controllers::hollow::{self, HollowConfig};
use minik8s_controllers::job::{self, COMPLETION_INDEX, JobOptions, TRACKING_FINALIZER};
use support::{WAIT, run_binder};
use testkit::{Backend, InProcess, eventually};

struct Cluster {
    _api: InProcess,
    client: Client,
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
    ];
    Ok(Cluster {
        _api: api,
        client,
        tasks,
    })
}

fn job(name: &str, spec: serde_json::Value, annotations: serde_json::Value) -> Job {
    let mut spec = spec;
    spec["template"] = serde_json::json!({
        "metadata": {"annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox:1.36"}],
        },
    });
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

fn condition<'a>(s: &'a JobStatus, type_: &str) -> Option<&'a str> {
    s.conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .and_then(|c| c.reason.as_deref())
}

async fn wait_condition(jobs: &Api<Job>, name: &str, type_: &str) -> JobStatus {
    eventually(WAIT, &format!("{name} {type_}"), || async {
        let s = jobs.get(name).await.ok()?.status?;
        condition(&s, type_).is_some().then_some(s)
    })
    .await
}

async fn event_reasons(client: &Client, job: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(job))
        .filter_map(|e| e.reason)
        .collect()
}

async fn job_pods(client: &Client, job: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn job_runs_pods_until_completions_succeed() -> anyhow::Result<()> {
    let c = cluster().await?;
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job(
            "pi",
            serde_json::json!({"completions": 3, "parallelism": 2}),
            serde_json::json!({}),
        ),
    )
    .await?;
    let status = wait_condition(&jobs, "pi", "Complete").await;
    assert_eq!(status.succeeded, Some(3));
    assert_eq!(status.failed, Some(0));
    assert_eq!(status.active, Some(0));
    assert_eq!(condition(&status, "Complete"), Some("CompletionsReached"));
    assert_eq!(
        condition(&status, "SuccessCriteriaMet"),
        Some("CompletionsReached")
    );
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    let uncounted = status.uncounted_terminated_pods.unwrap_or_default();
    assert!(uncounted.succeeded.is_none() && uncounted.failed.is_none());

    // Every pod was counted and let go of.
    let pods = job_pods(&c.client, "pi").await;
    assert_eq!(pods.len(), 3);
    for p in &pods {
        assert!(!p.finalizers().iter().any(|f| f == TRACKING_FINALIZER));
        assert_eq!(p.owner_references()[0].kind, "Job");
    }
    let reasons = eventually(WAIT, "events recorded", || async {
        let r = event_reasons(&c.client, "pi").await;
        r.contains(&"Completed".to_string()).then_some(r)
    })
    .await;
    assert!(reasons.contains(&"SuccessfulCreate".to_string()));
    Ok(())
}

#[tokio::test]
async fn failing_pods_exhaust_the_backoff_limit() -> anyhow::Result<()> {
    let c = cluster().await?;
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job(
            "flaky",
            serde_json::json!({"backoffLimit": 1}),
            serde_json::json!({"hollow.minik8s.io/exit-code": "1"}),
        ),
    )
    .await?;
    let status = wait_condition(&jobs, "flaky", "Failed").await;
    assert_eq!(condition(&status, "Failed"), Some("BackoffLimitExceeded"));
    assert_eq!(
        condition(&status, "FailureTarget"),
        Some("BackoffLimitExceeded")
    );
    assert_eq!(status.failed, Some(2));
    assert_eq!(status.succeeded, Some(0));
    assert!(status.completion_time.is_none());
    assert_eq!(job_pods(&c.client, "flaky").await.len(), 2);
    eventually(WAIT, "a BackoffLimitExceeded event", || async {
        event_reasons(&c.client, "flaky")
            .await
            .contains(&"BackoffLimitExceeded".to_string())
            .then_some(())
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn indexed_jobs_complete_every_index() -> anyhow::Result<()> {
    let c = cluster().await?;
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job(
            "ix",
            serde_json::json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
            serde_json::json!({}),
        ),
    )
    .await?;
    let status = wait_condition(&jobs, "ix", "Complete").await;
    assert_eq!(status.completed_indexes.as_deref(), Some("0-2"));
    assert_eq!(status.succeeded, Some(3));
    let mut indexes: Vec<String> = job_pods(&c.client, "ix")
        .await
        .iter()
        .map(|p| {
            let ix = p.annotations()[COMPLETION_INDEX].clone();
            assert_eq!(p.labels()[COMPLETION_INDEX], ix);
            let hostname = p.spec.as_ref().unwrap().hostname.clone().unwrap();
            assert_eq!(hostname, format!("ix-{ix}"));
            ix
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2"]);
    Ok(())
}

#[tokio::test]
async fn suspending_a_job_deletes_its_pods_and_resuming_restarts_them() -> anyhow::Result<()> {
    let c = cluster().await?;
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job(
            "long",
            serde_json::json!({"parallelism": 2, "completions": 2}),
            serde_json::json!({"hollow.minik8s.io/exit-code": "0", "hollow.minik8s.io/run-seconds": "3600"}),
        ),
    )
    .await?;
    eventually(WAIT, "two running pods", || async {
        let s = jobs.get("long").await.ok()?.status?;
        (s.active == Some(2) && s.ready == Some(2)).then_some(())
    })
    .await;
    let suspend = |on: bool| serde_json::json!({"spec": {"suspend": on}});
    jobs.patch(
        "long",
        &PatchParams::default(),
        &Patch::Merge(suspend(true)),
    )
    .await?;
    let status = wait_condition(&jobs, "long", "Suspended").await;
    assert_eq!(condition(&status, "Suspended"), Some("JobSuspended"));
    eventually(WAIT, "the pods gone", || async {
        let s = jobs.get("long").await.ok()?.status?;
        let pods = job_pods(&c.client, "long").await;
        (s.active == Some(0) && pods.is_empty()).then_some(())
    })
    .await;
    jobs.patch(
        "long",
        &PatchParams::default(),
        &Patch::Merge(suspend(false)),
    )
    .await?;
    let status = eventually(WAIT, "two pods again", || async {
        let s = jobs.get("long").await.ok()?.status?;
        (s.active == Some(2)).then_some(s)
    })
    .await;
    let suspended = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Suspended")
        .unwrap();
    assert_eq!(suspended.status, "False");
    assert_eq!(suspended.reason.as_deref(), Some("JobResumed"));
    assert!(condition(&jobs.get("long").await?.status.unwrap(), "Failed").is_none());
    Ok(())
}

#[tokio::test]
async fn jobs_past_their_deadline_fail() -> anyhow::Result<()> {
    let c = cluster().await?;
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job(
            "slow",
            serde_json::json!({"activeDeadlineSeconds": 1}),
            serde_json::json!({"hollow.minik8s.io/exit-code": "0", "hollow.minik8s.io/run-seconds": "3600"}),
        ),
    )
    .await?;
    let status = wait_condition(&jobs, "slow", "Failed").await;
    assert_eq!(condition(&status, "Failed"), Some("DeadlineExceeded"));
    assert_eq!(status.active, Some(0));
    eventually(WAIT, "the pod gone", || async {
        job_pods(&c.client, "slow").await.is_empty().then_some(())
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn pods_of_a_deleted_job_lose_the_tracking_finalizer() -> anyhow::Result<()> {
    let c = cluster().await?;
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job(
            "gone",
            serde_json::json!({"parallelism": 2, "completions": 2}),
            serde_json::json!({"hollow.minik8s.io/exit-code": "0", "hollow.minik8s.io/run-seconds": "3600"}),
        ),
    )
    .await?;
    eventually(WAIT, "two running pods with the finalizer", || async {
        let pods = job_pods(&c.client, "gone").await;
        let tracked = pods
            .iter()
            .filter(|p| p.finalizers().iter().any(|f| f == TRACKING_FINALIZER))
            .count();
        (tracked == 2).then_some(())
    })
    .await;
    jobs.delete("gone", &Default::default()).await?;
    eventually(WAIT, "the finalizers removed", || async {
        let pods = job_pods(&c.client, "gone").await;
        let released = pods
            .iter()
            .all(|p| !p.finalizers().iter().any(|f| f == TRACKING_FINALIZER));
        (pods.len() == 2 && released).then_some(())
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn a_fail_job_rule_fails_the_job_at_the_first_match() -> anyhow::Result<()> {
    let c = cluster().await?;
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job(
            "policy",
            serde_json::json!({"backoffLimit": 6, "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
            ]}}),
            serde_json::json!({"hollow.minik8s.io/exit-code": "42"}),
        ),
    )
    .await?;
    let status = wait_condition(&jobs, "policy", "Failed").await;
    assert_eq!(condition(&status, "Failed"), Some("PodFailurePolicy"));
    assert_eq!(status.failed, Some(1));
    let pods = job_pods(&c.client, "policy").await;
    assert_eq!(pods.len(), 1);
    let message = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .and_then(|c| c.message)
        .unwrap();
    assert!(message.contains("failed with exit code 42 matching FailJob rule at index 0"));
    Ok(())
}
