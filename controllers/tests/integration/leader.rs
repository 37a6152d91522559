//! Leader election through a Lease: one holder at a time, hand-over on release and on expiry.

use std::time::Duration;

use minik8s_controllers::leader::{LeaderElectionConfig, LeaderElector};
use testkit::{Backend, InProcess};

fn config(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(100),
        ..LeaderElectionConfig::new("test-election")
    }
}

#[tokio::test]
async fn one_leader_at_a_time() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let mut a = LeaderElector::new(api.client(), config("a"));
    let mut b = LeaderElector::new(api.client(), config("b"));
    a.acquire().await;

    // While a renews, b cannot take the lease.
    let renewing = tokio::spawn(async move {
        let lost = a.keep_renewing().await;
        panic!("a lost the lease: {lost}");
    });
    let attempt = tokio::time::timeout(Duration::from_secs(4), b.acquire()).await;
    assert!(attempt.is_err(), "b acquired a lease a is renewing");

    // a dies without releasing: b takes over once the lease has not changed for its duration.
    renewing.abort();
    tokio::time::timeout(Duration::from_secs(10), b.acquire())
        .await
        .expect("b takes the expired lease");

    // b releases: a new candidate gets it at once.
    b.release().await;
    let mut c = LeaderElector::new(api.client(), config("c"));
    tokio::time::timeout(Duration::from_millis(1500), c.acquire())
        .await
        .expect("c takes the released lease");
    let lease: k8s_openapi::api::coordination::v1::Lease =
        kube::Api::namespaced(api.client(), "kube-system")
            .get("test-election")
            .await?;
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("c"));
    assert_eq!(spec.lease_transitions, Some(2));
    Ok(())
}
