//! `kubectl certificate deny` next to approvals the signing controller acts on: the requests
//! are cluster-scoped, so their names carry the binary's tag and the run id.

use anyhow::{Context, ensure};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};

use super::{SETTLE, get_json};
use crate::kubectl::{Ctx, row, yaml};
use crate::support::{contains, eventually};

/// A CertificateSigningRequest for the kube-apiserver-client signer: the PEM of a request
/// for `cn` with a fresh key.
fn csr_manifest(name: &str, cn: &str, usages: &[&str], seconds: i32) -> anyhow::Result<Value> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let request = params.serialize_request(&key)?.pem()?;
    Ok(
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": k8s_openapi::ByteString(request.into_bytes()),
                     "signerName": "kubernetes.io/kube-apiserver-client",
                     "expirationSeconds": seconds,
                     "usages": usages}}),
    )
}

/// The CONDITION column of `kubectl get csr NAME`.
async fn csr_condition(c: &Ctx, name: &str) -> anyhow::Result<String> {
    let out = c.ok(&["get", "csr", name]).await?;
    Ok(row(&out, name)?
        .last()
        .copied()
        .unwrap_or_default()
        .to_string())
}

/// The requests of one run of the case.
struct Requests {
    denied: String,
    /// 600 s: a short-lived certificate.
    short: String,
    /// A day: past upstream's eight hours, so its end is backdated too.
    long: String,
    /// Asks the client signer for `server auth`.
    failed: String,
}

impl Requests {
    fn all(&self) -> [&str; 4] {
        [&self.denied, &self.short, &self.long, &self.failed]
    }
}

/// `kubectl certificate deny` next to approvals: the Denied condition kubectl writes, an
/// approval of a denied request refused by kubectl, certificates issued for approved
/// requests with upstream's validity, and an approved request the signer fails for a usage
/// its signer does not give; the denied one never gets a certificate.
pub async fn certificate_deny(c: &Ctx) -> anyhow::Result<()> {
    let suffix = format!("{}-{}", c.bin.tag, c.env.run);
    let reqs = Requests {
        denied: format!("csr-denied-{suffix}"),
        short: format!("csr-short-{suffix}"),
        long: format!("csr-long-{suffix}"),
        failed: format!("csr-failed-{suffix}"),
    };
    let csrs: Api<CertificateSigningRequest> = Api::all(c.client.clone());
    for name in reqs.all() {
        let _ = csrs.delete(name, &DeleteParams::default()).await;
    }
    let result = certificate_decisions(c, &reqs).await;
    for name in reqs.all() {
        let _ = csrs.delete(name, &DeleteParams::default()).await;
    }
    result
}

async fn certificate_decisions(c: &Ctx, reqs: &Requests) -> anyhow::Result<()> {
    let cn = format!("csr-user-{}", c.bin.tag);
    let docs = [
        csr_manifest(&reqs.denied, &cn, &["client auth"], 600)?,
        csr_manifest(&reqs.short, &cn, &["client auth"], 600)?,
        csr_manifest(&reqs.long, &cn, &["client auth"], 86400)?,
        csr_manifest(&reqs.failed, &cn, &["server auth"], 600)?,
    ];
    let manifest: Vec<String> = docs.iter().map(yaml).collect();
    let file = c.write("csrs.yaml", &manifest.join("---\n"))?;
    c.ok(&["create", "-f", &file]).await?;
    let out = c.ok(&["get", "csr", &reqs.short]).await?;
    let r = row(&out, &reqs.short)?;
    ensure!(
        r.len() >= 3 && r[r.len() - 2] == "10m" && r[r.len() - 1] == "Pending",
        "requested duration and condition: {out}"
    );

    let denied = reqs.denied.as_str();
    let out = c.ok(&["certificate", "deny", denied]).await?;
    contains(
        &out,
        &format!("certificatesigningrequest.certificates.k8s.io/{denied} denied"),
    )?;
    ensure!(csr_condition(c, denied).await? == "Denied", "not Denied");
    let csr = get_json(c, "csr", denied).await?;
    let conditions = &csr["status"]["conditions"];
    ensure!(
        conditions.as_array().map(Vec::len) == Some(1)
            && conditions[0]["type"] == "Denied"
            && conditions[0]["status"] == "True"
            && conditions[0]["reason"] == "KubectlDeny"
            && conditions[0]["message"] == "This CSR was denied by kubectl certificate deny."
            && conditions[0]["lastUpdateTime"].is_string()
            && conditions[0]["lastTransitionTime"].is_string(),
        "conditions after deny: {conditions}"
    );
    // Denying again changes nothing; approving a denied request is refused by kubectl.
    let out = c.ok(&["certificate", "deny", denied]).await?;
    contains(&out, "denied")?;
    let err = c.fails(&["certificate", "approve", denied]).await?;
    contains(
        &err,
        &format!("certificate signing request \"{denied}\" is already Denied"),
    )?;

    let out = c
        .ok(&[
            "certificate",
            "approve",
            &reqs.short,
            &reqs.long,
            &reqs.failed,
        ])
        .await?;
    for name in [&reqs.short, &reqs.long, &reqs.failed] {
        contains(
            &out,
            &format!("certificatesigningrequest.certificates.k8s.io/{name} approved"),
        )?;
    }
    // Upstream's signer starts certificates five minutes back; one shorter than eight hours
    // still ends `expirationSeconds` after it was signed, a longer one that much after its
    // start.
    let (not_before, not_after, subject) = issued(c, &reqs.short).await?;
    let now = unix_now()?;
    ensure!(
        (480..=610).contains(&(not_after - now)) && not_after - not_before == 900,
        "{}: from {not_before} to {not_after} (now {now}): expected 600 s from its signing, \
         starting 300 s before it",
        reqs.short
    );
    ensure!(subject == format!("CN={cn}"), "subject {subject}");
    let (not_before, not_after, _) = issued(c, &reqs.long).await?;
    let now = unix_now()?;
    ensure!(
        (now - 330..=now - 290).contains(&not_before) && not_after - not_before == 86400,
        "{}: from {not_before} to {not_after} (now {now}): expected 86400 s starting 300 s \
         before its signing",
        reqs.long
    );

    let failed = reqs.failed.as_str();
    eventually(SETTLE, "the request to fail", || async {
        let condition = csr_condition(c, failed).await?;
        ensure!(condition == "Approved,Failed", "condition {condition}");
        Ok(())
    })
    .await?;
    let csr = get_json(c, "csr", failed).await?;
    let failure = csr["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .unwrap_or_default();
    ensure!(
        failure["reason"] == "SignerValidationFailure"
            && failure["message"] == "invalid usage for client certificate: server auth"
            && csr["status"]["certificate"].is_null(),
        "failed request: {}",
        csr["status"]
    );

    // The signer has handled the later requests; the denied one got nothing.
    let csr = get_json(c, "csr", denied).await?;
    ensure!(
        csr["status"]["certificate"].is_null()
            && csr["status"]["conditions"].as_array().map(Vec::len) == Some(1),
        "denied request: {}",
        csr["status"]
    );
    Ok(())
}

/// Waits for the certificate of an approved request; its validity (Unix seconds) and
/// subject.
async fn issued(c: &Ctx, name: &str) -> anyhow::Result<(i64, i64, String)> {
    eventually(SETTLE, &format!("{name} issued"), || async {
        let condition = csr_condition(c, name).await?;
        ensure!(condition == "Approved,Issued", "condition {condition}");
        Ok(())
    })
    .await?;
    let csr = get_json(c, "csr", name).await?;
    let cert = csr["status"]["certificate"]
        .as_str()
        .context("no status.certificate")?;
    let pem = base64_decode(cert)?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem)
        .map_err(|e| anyhow::anyhow!("the certificate of {name}: {e}"))?;
    let parsed = pem
        .parse_x509()
        .map_err(|e| anyhow::anyhow!("the certificate of {name}: {e}"))?;
    let validity = parsed.validity();
    Ok((
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
        parsed.subject().to_string(),
    ))
}

fn unix_now() -> anyhow::Result<i64> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    Ok(i64::try_from(secs)?)
}

fn base64_decode(s: &str) -> anyhow::Result<Vec<u8>> {
    use base64::Engine;
    Ok(base64::engine::general_purpose::STANDARD.decode(s)?)
}
