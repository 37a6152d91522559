//! Encryption at rest over both backends: what the store holds, reads through the API, the
//! key rotation procedure of docs/security.md, and data stored before encryption was on.

use std::sync::Arc;

use http::StatusCode;
use minik8s_apiserver::ApiServer;
use minik8s_apiserver::metrics::Metrics;
use minik8s_apiserver::storage::encryption::{EncryptedStore, Transformers};
use minik8s_apiserver::storage::{DynStore, EtcdStore, SqliteOptions, SqliteStore, Store};
use serde_json::json;
use testkit::{Etcd, InProcess};

const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const KEY: &str = "/registry/secrets/default/db";
/// base64 of the secret's value, as the stored JSON would hold it unencrypted.
const VALUE_B64: &str = "aHVudGVyMi1wbGFpbnRleHQ=";
const KEY1: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI="; // 32 bytes
const KEY2: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXphYmNkZWY="; // 32 bytes

/// A store as it lies on disk (or in etcd), without encryption in front.
struct Raw {
    store: DynStore,
    _dir: tempfile::TempDir,
    _etcd: Option<Etcd>,
}

async fn sqlite() -> Raw {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        SqliteOptions::new(dir.path().join("state.db")),
        Metrics::new().store.clone(),
    )
    .unwrap();
    Raw {
        store: Arc::new(store),
        _dir: dir,
        _etcd: None,
    }
}

async fn etcd() -> Raw {
    let etcd = Etcd::start().expect("etcd (apt-get install etcd-server)");
    let store = EtcdStore::connect(
        std::slice::from_ref(&etcd.endpoint),
        Metrics::new().store.clone(),
    )
    .await
    .unwrap();
    Raw {
        store: Arc::new(store),
        _dir: tempfile::tempdir().unwrap(),
        _etcd: Some(etcd),
    }
}

/// An EncryptionConfiguration for secrets with `providers` (YAML flow list).
fn config(providers: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: {providers}\n"
    )
}

fn aescbc(keys: &[(&str, &str)]) -> String {
    let keys: Vec<String> = keys
        .iter()
        .map(|(n, s)| format!("{{name: {n}, secret: {s}}}"))
        .collect();
    format!("{{aescbc: {{keys: [{}]}}}}", keys.join(", "))
}

/// An API server over `raw` with `config` (none: no encryption), as after a restart.
async fn start(raw: &Raw, config: Option<&str>) -> InProcess {
    let store = match config {
        Some(c) => EncryptedStore::wrap(
            raw.store.clone(),
            Transformers::parse(c.as_bytes()).unwrap(),
        ),
        None => raw.store.clone(),
    };
    let server = ApiServer::new(
        store,
        Arc::new(Metrics::new()),
        minik8s_apiserver::auth::Authenticator::new(),
        testkit::test_serve_options(),
        "127.0.0.1:6443".into(),
    );
    server.bootstrap(&[]).await.unwrap();
    InProcess::from_server(server)
}

async fn stored(raw: &Raw, key: &str) -> Vec<u8> {
    raw.store
        .get(key)
        .await
        .unwrap()
        .expect("stored")
        .value
        .to_vec()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

async fn create_secret(api: &InProcess, name: &str) {
    let secret = json!({"metadata": {"name": name}, "data": {"password": VALUE_B64}});
    let r = api.post(SECRETS, secret).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

async fn read_secret(api: &InProcess, name: &str) -> serde_json::Value {
    let r = api.get(&format!("{SECRETS}/{name}")).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

/// `kubectl get secrets -A -o json | kubectl replace -f -`: every secret written back as read.
async fn rewrite_all_secrets(api: &InProcess) {
    let list = api.get("/api/v1/secrets").await.json();
    for item in list["items"].as_array().unwrap() {
        let ns = item["metadata"]["namespace"].as_str().unwrap();
        let name = item["metadata"]["name"].as_str().unwrap();
        let mut item = item.clone();
        item["kind"] = "Secret".into();
        item["apiVersion"] = "v1".into();
        let r = api
            .put(&format!("/api/v1/namespaces/{ns}/secrets/{name}"), item)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
}

async fn rotation(raw: Raw) {
    let old = config(&format!(
        "[{}, {{identity: {{}}}}]",
        aescbc(&[("key1", KEY1)])
    ));
    let api = start(&raw, Some(&old)).await;
    create_secret(&api, "db").await;
    let value = stored(&raw, KEY).await;
    assert!(value.starts_with(b"k8s:enc:aescbc:v1:key1:"));
    assert!(!contains(&value, VALUE_B64) && !contains(&value, "password"));
    assert_eq!(read_secret(&api, "db").await["data"]["password"], VALUE_B64);
    // Other resources are stored as they are.
    let cm = json!({"metadata": {"name": "plain"}, "data": {"k": "visible"}});
    api.post("/api/v1/namespaces/default/configmaps", cm).await;
    assert!(contains(
        &stored(&raw, "/registry/configmaps/default/plain").await,
        "visible"
    ));
    drop(api);

    // 1. The new key second: every server can read what another writes with either key.
    let both = config(&format!("[{}]", aescbc(&[("key1", KEY1), ("key2", KEY2)])));
    let api = start(&raw, Some(&both)).await;
    assert_eq!(read_secret(&api, "db").await["data"]["password"], VALUE_B64);
    drop(api);
    // 2. The new key first: new writes use it; old values still read.
    let swapped = config(&format!("[{}]", aescbc(&[("key2", KEY2), ("key1", KEY1)])));
    let api = start(&raw, Some(&swapped)).await;
    assert_eq!(read_secret(&api, "db").await["data"]["password"], VALUE_B64);
    create_secret(&api, "fresh").await;
    assert!(
        stored(&raw, "/registry/secrets/default/fresh")
            .await
            .starts_with(b"k8s:enc:aescbc:v1:key2:")
    );
    // 3. Every secret rewritten unchanged: each is encrypted with the new key.
    rewrite_all_secrets(&api).await;
    assert!(
        stored(&raw, KEY)
            .await
            .starts_with(b"k8s:enc:aescbc:v1:key2:")
    );
    drop(api);
    // 4. The old key removed: everything still reads.
    let new_only = config(&format!("[{}]", aescbc(&[("key2", KEY2)])));
    let api = start(&raw, Some(&new_only)).await;
    assert_eq!(read_secret(&api, "db").await["data"]["password"], VALUE_B64);
    assert_eq!(
        api.get(SECRETS).await.json()["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    drop(api);
    // Without the key in use, a secret cannot be read.
    let lost = config(&format!("[{}]", aescbc(&[("key1", KEY1)])));
    let api = start(&raw, Some(&lost)).await;
    let r = api.get(&format!("{SECRETS}/db")).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("no matching key was found for the provided AES transformer"),
        "{message}"
    );
}

async fn plaintext_before_encryption(raw: Raw) {
    let api = start(&raw, None).await;
    create_secret(&api, "db").await;
    assert!(contains(&stored(&raw, KEY).await, VALUE_B64));
    drop(api);
    // Encryption without identity: plaintext does not read (upstream's behaviour).
    let strict = config(&format!("[{}]", aescbc(&[("key1", KEY1)])));
    let api = start(&raw, Some(&strict)).await;
    let r = api.get(&format!("{SECRETS}/db")).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(message.contains("no matching prefix found"), "{message}");
    drop(api);
    // Identity listed after the key: the old value reads, and new writes encrypt.
    let on = config(&format!(
        "[{}, {{identity: {{}}}}]",
        aescbc(&[("key1", KEY1)])
    ));
    let api = start(&raw, Some(&on)).await;
    assert_eq!(read_secret(&api, "db").await["data"]["password"], VALUE_B64);
    assert!(contains(&stored(&raw, KEY).await, VALUE_B64));
    rewrite_all_secrets(&api).await;
    let value = stored(&raw, KEY).await;
    assert!(value.starts_with(b"k8s:enc:aescbc:v1:key1:") && !contains(&value, VALUE_B64));
    drop(api);
    // Once rewritten, identity can go.
    let api = start(&raw, Some(&strict)).await;
    assert_eq!(read_secret(&api, "db").await["data"]["password"], VALUE_B64);
}

#[tokio::test]
async fn rotation_sqlite() {
    rotation(sqlite().await).await;
}

#[tokio::test]
async fn rotation_etcd() {
    rotation(etcd().await).await;
}

#[tokio::test]
async fn plaintext_before_encryption_sqlite() {
    plaintext_before_encryption(sqlite().await).await;
}

#[tokio::test]
async fn plaintext_before_encryption_etcd() {
    plaintext_before_encryption(etcd().await).await;
}

#[tokio::test]
async fn the_flag_encrypts_what_the_server_stores() {
    let etcd = Etcd::start().expect("etcd (apt-get install etcd-server)");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("encryption.yaml");
    let secretbox = format!("[{{secretbox: {{keys: [{{name: sb, secret: {KEY1}}}]}}}}]");
    std::fs::write(&path, config(&secretbox)).unwrap();
    let endpoint = etcd.endpoint.clone();
    let api = InProcess::start_with(testkit::Backend::Sqlite, move |c| {
        c.etcd_servers = vec![endpoint];
        c.encryption_provider_config = Some(path);
    })
    .await
    .unwrap();
    create_secret(&api, "db").await;
    assert_eq!(read_secret(&api, "db").await["data"]["password"], VALUE_B64);
    let raw = EtcdStore::connect(
        std::slice::from_ref(&etcd.endpoint),
        Metrics::new().store.clone(),
    )
    .await
    .unwrap();
    let value = raw.get(KEY).await.unwrap().unwrap().value;
    assert!(value.starts_with(b"k8s:enc:secretbox:v1:sb:"));
    // A bad file stops the server from starting.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        config("[{aescbc: {keys: [{name: k, secret: c2hvcnQ=}]}}]"),
    )
    .unwrap();
    let err = InProcess::start_with(testkit::Backend::Sqlite, move |c| {
        c.encryption_provider_config = Some(bad);
    })
    .await
    .err()
    .expect("refused");
    assert!(
        err.to_string()
            .contains("secret is not of the expected length, got 5"),
        "{err}"
    );
}
