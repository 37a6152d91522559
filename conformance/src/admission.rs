//! Admission webhooks and policies on the cluster's real kubelet, once per run: a validating
//! and a mutating webhook served by a pod (a small HTTPS server in the python image, behind
//! a Service, its certificate from a CA the suite makes and passes as the caBundle) that
//! refuse and label pods; failurePolicy Fail and then Ignore once the webhook's pod is gone;
//! a ValidatingAdmissionPolicy bounding Deployments' replicas; an aggregated API served by a
//! pod through an APIService, found by kube-rs discovery and listed as the client's user.
//!
//! The webhooks select only pods with the suite's own label, so the other suites' pods,
//! created meanwhile, never reach them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::Env;
use crate::support::{self, CaseFn, eventually};

pub const CASES: &[(&str, CaseFn<Ctx>)] = crate::cases! { Ctx;
    "webhooks-served-by-a-pod" => webhooks_served_by_a_pod,
    "validating-admission-policy" => validating_admission_policy,
    "aggregated-api-served-by-a-pod" => aggregated_api_served_by_a_pod,
    "pod-security-levels" => pod_security_levels,
};

pub struct Ctx {
    client: kube::Client,
    ns: String,
}

pub async fn run(env: &Arc<Env>) {
    let ctx = Ctx {
        client: env.client.clone(),
        ns: format!("conf-admission-{}", env.run),
    };
    if let Err(e) = support::create_namespace(&ctx.client, &ctx.ns).await {
        support::fail_set_up("admission", CASES, &env.selection, &env.report, &e);
        return;
    }
    support::run_cases(
        "admission",
        &ctx,
        CASES,
        &env.selection,
        &env.report,
        Duration::from_secs(240),
    )
    .await;
    for name in [format!("{}-mutate", ctx.ns), format!("{}-validate", ctx.ns)] {
        let dp = DeleteParams::default();
        let _ = Api::<MutatingWebhookConfiguration>::all(ctx.client.clone())
            .delete(&name, &dp)
            .await;
        let _ = Api::<ValidatingWebhookConfiguration>::all(ctx.client.clone())
            .delete(&name, &dp)
            .await;
    }
    let _ = Api::<APIService>::all(ctx.client.clone())
        .delete(WARDLE, &DeleteParams::default())
        .await;
    support::remove_namespace(&ctx.client, &ctx.ns, &[]).await;
}

const WARDLE: &str = "v1alpha1.wardle.example.com";

/// What the suite's python servers share: the imports and a JSON reply; each script defines
/// its handler `H`, and [`PY_SERVE`] serves it over TLS on 8443.
const PY_PRELUDE: &str = r#"
import base64, http.server, json, ssl
def reply(h, body):
    data = json.dumps(body).encode()
    h.send_response(200)
    h.send_header('Content-Type', 'application/json')
    h.send_header('Content-Length', str(len(data)))
    h.end_headers()
    h.wfile.write(data)
"#;

const PY_SERVE: &str = r#"
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain('/tls/tls.crt', '/tls/tls.key')
srv = http.server.ThreadingHTTPServer(('', 8443), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;

/// The aggregated server: a group version with one resource, flunders, whose one object is
/// named after the user the front-proxy headers name.
const AGGREGATED_PY: &str = r#"
GV = '/apis/wardle.example.com/v1alpha1'
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split('?')[0]
        if path == GV:
            body = {'kind': 'APIResourceList', 'apiVersion': 'v1',
                    'groupVersion': 'wardle.example.com/v1alpha1',
                    'resources': [{'name': 'flunders', 'singularName': 'flunder', 'namespaced': True,
                                   'kind': 'Flunder', 'verbs': ['get', 'list']}]}
        elif path.startswith(GV + '/namespaces/') and path.endswith('/flunders'):
            ns = path.split('/')[5]
            user = self.headers.get('X-Remote-User', 'nobody').replace(':', '-')
            body = {'kind': 'FlunderList', 'apiVersion': 'wardle.example.com/v1alpha1',
                    'metadata': {'resourceVersion': '1'},
                    'items': [{'kind': 'Flunder', 'apiVersion': 'wardle.example.com/v1alpha1',
                               'metadata': {'name': 'seen-by-' + user, 'namespace': ns}}]}
        else:
            self.send_response(404)
            self.end_headers()
            return
        reply(self, body)
"#;

/// The webhook: refuses pods labelled `deny=yes` on /validate, labels pods
/// `mutated=by-webhook` on /mutate.
const WEBHOOK_PY: &str = r#"
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        req = review['request']
        labels = ((req.get('object') or {}).get('metadata') or {}).get('labels') or {}
        resp = {'uid': req['uid'], 'allowed': True}
        if self.path.startswith('/validate') and labels.get('deny') == 'yes':
            resp = {'uid': req['uid'], 'allowed': False, 'status': {
                'code': 403, 'reason': 'Forbidden', 'message': 'pods labelled deny are refused'}}
        elif self.path.startswith('/mutate'):
            patch = [{'op': 'add', 'path': '/metadata/labels/mutated', 'value': 'by-webhook'}]
            resp['patchType'] = 'JSONPatch'
            resp['patch'] = base64.b64encode(json.dumps(patch).encode()).decode()
        reply(self, {'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
                     'response': resp})
"#;

/// A CA and a serving certificate for `host` it signed: (CA PEM, cert PEM, key PEM).
fn certificates(host: &str) -> anyhow::Result<(String, String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "conformance-webhook-ca");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.pem(), ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![host.to_string()])?;
    params.distinguished_name.push(DnType::CommonName, host);
    let cert = params.signed_by(&key, &issuer)?;
    Ok((ca.pem(), cert.pem(), key.serialize_pem()))
}

fn webhook(name: &str, ns: &str, path: &str, ca: &str, failure_policy: &str) -> Value {
    use base64::Engine;
    json!({
        "name": name,
        "clientConfig": {
            "service": {"namespace": ns, "name": "webhook", "path": path, "port": 443},
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
        },
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["pods"], "scope": "Namespaced"}],
        "objectSelector": {"matchLabels": {"webhook-test": ns}},
        "failurePolicy": failure_policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    })
}

impl Ctx {
    /// A pod the webhooks see (`deny=yes` when `deny`), named by the server.
    fn probe_pod(&self, deny: bool) -> anyhow::Result<Pod> {
        let mut labels = json!({"webhook-test": self.ns});
        if deny {
            labels["deny"] = json!("yes");
        }
        Ok(serde_json::from_value(json!({
            "metadata": {"generateName": "probe-", "labels": labels},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "Never",
                                "command": ["sleep", "3600"]}],
            },
        }))?)
    }

    /// Starts the webhook's Secret, pod and Service.
    async fn serve_webhook(&self, cert: &str, key: &str) -> anyhow::Result<()> {
        self.serve_python("webhook", WEBHOOK_PY, cert, key).await
    }

    /// Starts `script` (a handler `H`, served over HTTPS on 8443 with the certificate) in a
    /// pod behind a Service `name` on port 443, and waits for it to be ready.
    async fn serve_python(
        &self,
        name: &str,
        script: &str,
        cert: &str,
        key: &str,
    ) -> anyhow::Result<()> {
        let pp = PostParams::default();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-tls")},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert, "tls.key": key},
        }))?;
        Api::<Secret>::namespaced(self.client.clone(), &self.ns)
            .create(&pp, &secret)
            .await?;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "server", "image": "python:3", "imagePullPolicy": "Never",
                    "command": ["python3", "-u", "-c", format!("{PY_PRELUDE}{script}{PY_SERVE}")],
                    "ports": [{"containerPort": 8443}],
                    "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 1},
                    "volumeMounts": [{"name": "tls", "mountPath": "/tls"}],
                }],
                "volumes": [{"name": "tls", "secret": {"secretName": format!("{name}-tls")}}],
            },
        }))?;
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .create(&pp, &pod)
            .await?;
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"selector": {"app": name},
                     "ports": [{"port": 443, "targetPort": 8443}]},
        }))?;
        Api::<Service>::namespaced(self.client.clone(), &self.ns)
            .create(&pp, &service)
            .await?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        eventually(
            Duration::from_secs(90),
            "the server's pod ready",
            || async {
                let p = pods.get(name).await?;
                let ready = p
                    .status
                    .and_then(|s| s.conditions)
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                ensure!(ready, "not ready yet");
                Ok(())
            },
        )
        .await
    }
}

async fn webhooks_served_by_a_pod(c: &Ctx) -> anyhow::Result<()> {
    let host = format!("webhook.{}.svc", c.ns);
    let (ca, cert, key) = certificates(&host)?;
    c.serve_webhook(&cert, &key).await?;
    let pp = PostParams::default();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(c.client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(c.client.clone());
    let vname = format!("{}-validate", c.ns);
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": vname},
        "webhooks": [webhook("deny.conformance.minik8s.io", &c.ns, "/validate", &ca, "Fail")],
    }))?;
    validating.create(&pp, &config).await?;
    let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": format!("{}-mutate", c.ns)},
        "webhooks": [webhook("label.conformance.minik8s.io", &c.ns, "/mutate", &ca, "Fail")],
    }))?;
    mutating.create(&pp, &config).await?;

    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    let refused = eventually(Duration::from_secs(30), "the webhook refusing", || async {
        match pods.create(&pp, &c.probe_pod(true)?).await {
            Err(kube::Error::Api(e)) if e.code == 403 => Ok(e.message),
            Err(e) => Err(e.into()),
            Ok(p) => anyhow::bail!("created {:?}", p.metadata.name),
        }
    })
    .await?;
    ensure!(
        refused
            == "admission webhook \"deny.conformance.minik8s.io\" denied the request: pods labelled deny are refused",
        "refusal: {refused}"
    );
    let created = pods.create(&pp, &c.probe_pod(false)?).await?;
    let labels = created.metadata.labels.unwrap_or_default();
    ensure!(
        labels.get("mutated").map(String::as_str) == Some("by-webhook"),
        "the mutating webhook's label is missing: {labels:?}"
    );

    // The webhook's pod gone: Fail refuses every pod it selects, Ignore lets them in.
    pods.delete("webhook", &DeleteParams::default()).await?;
    let failed = eventually(
        Duration::from_secs(60),
        "the webhook failing closed",
        || async {
            match pods.create(&pp, &c.probe_pod(false)?).await {
                Err(kube::Error::Api(e)) if e.code == 500 => Ok(e.message),
                Err(e) => Err(e.into()),
                Ok(p) => anyhow::bail!("created {:?}", p.metadata.name),
            }
        },
    )
    .await?;
    ensure!(
        failed.contains("failed calling webhook"),
        "failure: {failed}"
    );
    let patch = json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]);
    for name in [vname.clone(), format!("{}-mutate", c.ns)] {
        let p: Patch<Value> = Patch::Json(serde_json::from_value(patch.clone())?);
        if name == vname {
            validating.patch(&name, &PatchParams::default(), &p).await?;
        } else {
            mutating.patch(&name, &PatchParams::default(), &p).await?;
        }
    }
    eventually(
        Duration::from_secs(30),
        "the webhooks failing open",
        || async {
            let p = pods.create(&pp, &c.probe_pod(true)?).await?;
            ensure!(
                !p.metadata
                    .labels
                    .unwrap_or_default()
                    .contains_key("mutated"),
                "labelled by a webhook that is gone"
            );
            Ok(())
        },
    )
    .await
    .context("with failurePolicy Ignore")?;
    validating.delete(&vname, &DeleteParams::default()).await?;
    mutating
        .delete(&format!("{}-mutate", c.ns), &DeleteParams::default())
        .await?;
    Ok(())
}

async fn validating_admission_policy(c: &Ctx) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let name = format!("{}-replicas", c.ns);
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(c.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(c.client.clone());
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                   "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": c.ns}},
            },
            "validations": [{"expression": "object.spec.replicas <= 3",
                             "message": "at most 3 replicas", "reason": "Forbidden"}],
        },
    }))?;
    policies.create(&pp, &policy).await?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }))?;
    bindings.create(&pp, &binding).await?;
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &c.ns);
    let deployment = |replicas: i32| -> anyhow::Result<Deployment> {
        Ok(serde_json::from_value(json!({
            "metadata": {"generateName": "bounded-"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "bounded"}},
                "template": {"metadata": {"labels": {"app": "bounded"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                             "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}},
            },
        }))?)
    };
    let refused = eventually(Duration::from_secs(30), "the policy refusing", || async {
        match deployments.create(&pp, &deployment(5)?).await {
            Err(kube::Error::Api(e)) if e.code == 403 => Ok(e.message),
            Err(e) => Err(e.into()),
            Ok(d) => {
                let name = d.metadata.name.unwrap_or_default();
                deployments.delete(&name, &DeleteParams::default()).await?;
                anyhow::bail!("created {name}")
            }
        }
    })
    .await?;
    ensure!(
        refused
            == format!(
                "ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: at most 3 replicas"
            ),
        "refusal: {refused}"
    );
    let created = deployments.create(&pp, &deployment(0)?).await?;
    let dname = created.metadata.name.unwrap_or_default();
    let scaled = deployments
        .patch(
            &dname,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await;
    ensure!(
        matches!(&scaled, Err(kube::Error::Api(e)) if e.code == 403),
        "an update past the bound: {scaled:?}"
    );
    deployments.delete(&dname, &DeleteParams::default()).await?;
    bindings.delete(&name, &DeleteParams::default()).await?;
    policies.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// PodSecurity: a namespace labelled `enforce=restricted` refuses a privileged pod with
/// upstream's message and admits a compliant one; one labelled `warn=baseline` admits a
/// Deployment with a privileged template, with upstream's `Warning` header.
async fn pod_security_levels(c: &Ctx) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    let ns = format!("{}-psa", c.ns);
    let labelled: Namespace = serde_json::from_value(json!({"metadata": {"name": ns, "labels": {
        "minik8s.io/conformance": "true",
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "baseline",
    }}}))?;
    namespaces.create(&PostParams::default(), &labelled).await?;
    let result = pod_security_in(c, &ns).await;
    support::remove_namespace(&c.client, &ns, &[]).await;
    result
}

async fn pod_security_in(c: &Ctx, ns: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), ns);
    let pp = PostParams::default();
    let privileged: Pod = serde_json::from_value(json!({
        "metadata": {"name": "privileged"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "Never",
            "command": ["sleep", "3600"], "securityContext": {"privileged": true}}]},
    }))?;
    match pods.create(&pp, &privileged).await {
        Err(kube::Error::Api(e)) if e.code == 403 => ensure!(
            e.message
                == concat!(
                    r#"pods "privileged" is forbidden: violates PodSecurity "restricted:latest": "#,
                    r#"privileged (container "c" must not set securityContext.privileged=true), "#,
                    r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), "#,
                    r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), "#,
                    r#"runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), "#,
                    r#"seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
                ),
            "refusal: {}",
            e.message
        ),
        other => anyhow::bail!("a privileged pod in a restricted namespace: {other:?}"),
    }
    let compliant: Pod = serde_json::from_value(json!({
        "metadata": {"name": "compliant"},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
        },
    }))?;
    pods.create(&pp, &compliant)
        .await
        .context("a compliant pod in a restricted namespace")?;
    pods.delete("compliant", &DeleteParams::default()).await?;

    // kube-rs drops Warning headers, so the Deployment is sent raw (as a dry run).
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "privileged"},
        "spec": {
            "selector": {"matchLabels": {"app": "privileged"}},
            "template": {"metadata": {"labels": {"app": "privileged"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                    "securityContext": {"privileged": true}}]}},
        },
    });
    let req = http::Request::post(format!(
        "/apis/apps/v1/namespaces/{ns}/deployments?dryRun=All"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(kube::client::Body::from(serde_json::to_vec(&deployment)?))?;
    let resp = c.client.send(req).await?;
    ensure!(
        resp.status() == http::StatusCode::CREATED,
        "dry-run create: {}",
        resp.status()
    );
    let warnings: Vec<&str> = resp
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let want = r#"299 - "would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)""#;
    ensure!(warnings == [want], "warnings: {warnings:?}");
    Ok(())
}

async fn aggregated_api_served_by_a_pod(c: &Ctx) -> anyhow::Result<()> {
    use base64::Engine;
    use kube::api::{ApiResource, DynamicObject, ListParams};
    let (ca, cert, key) = certificates(&format!("wardle.{}.svc", c.ns))?;
    c.serve_python("wardle", AGGREGATED_PY, &cert, &key).await?;
    let services: Api<APIService> = Api::all(c.client.clone());
    let _ = services.delete(WARDLE, &DeleteParams::default()).await;
    let api: APIService = serde_json::from_value(json!({
        "metadata": {"name": WARDLE},
        "spec": {
            "group": "wardle.example.com", "version": "v1alpha1",
            "service": {"namespace": c.ns, "name": "wardle", "port": 443},
            "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca),
            "groupPriorityMinimum": 1000, "versionPriority": 15,
        },
    }))?;
    services.create(&PostParams::default(), &api).await?;
    eventually(
        Duration::from_secs(60),
        "the APIService Available",
        || async {
            let a = services.get(WARDLE).await?;
            let available = a
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "Available");
            ensure!(
                available.as_ref().is_some_and(|c| c.status == "True"),
                "Available: {available:?}"
            );
            Ok(())
        },
    )
    .await?;
    // kube-rs finds the resource through discovery, then lists it through the proxy.
    let discovery = kube::Discovery::new(c.client.clone())
        .filter(&["wardle.example.com"])
        .run()
        .await?;
    let (resource, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.plural == "flunders")
        .context("flunders not in discovery")?;
    ensure!(
        caps.scope == kube::discovery::Scope::Namespaced,
        "flunders' scope: {:?}",
        caps.scope
    );
    let flunders: Api<DynamicObject> =
        Api::namespaced_with(c.client.clone(), &c.ns, &ApiResource { ..resource });
    let list = flunders.list(&ListParams::default()).await?;
    let names: Vec<String> = list
        .items
        .iter()
        .filter_map(|f| f.metadata.name.clone())
        .collect();
    ensure!(
        names.len() == 1 && names[0].starts_with("seen-by-") && names[0] != "seen-by-nobody",
        "flunders: {names:?}"
    );
    services.delete(WARDLE, &DeleteParams::default()).await?;
    Ok(())
}
