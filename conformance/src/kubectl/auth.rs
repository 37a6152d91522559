//! Authorization as each kubectl drives it: `auth can-i` (SelfSubjectAccessReview and, with
//! `--list`, SelfSubjectRulesReview, answered by RBAC for an impersonated service account),
//! `auth whoami`, `auth reconcile` (kubectl's own semantic merge of rules and subjects, so the
//! server only sees gets, creates, updates and a delete with a UID precondition), `create role`,
//! `rolebinding`, `clusterrole` (with an aggregation rule the controller fills) and
//! `clusterrolebinding`, the escalation check refusing a service account a role it could not
//! use itself, and `kubectl certificate deny` next to an approval that is signed or failed.
//!
//! The authorizer follows RBAC objects through its caches a moment after they are written,
//! so every check that follows a new binding polls. Cluster-scoped names carry the binary's
//! tag and the run id, as several kubectl binaries run at once against one cluster.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use super::{Ctx, header, row, yaml};
use crate::support::{contains, eventually};

mod certificates;
mod rbac;

pub use certificates::certificate_deny;
pub use rbac::create_rbac;

/// How long the authorizer and the controllers may take to follow a write.
const SETTLE: Duration = Duration::from_secs(30);

/// `kubectl auth can-i ARGS`: `yes` with exit 0, or `no` with exit 1, as kubectl answers an
/// allowed and a denied review (a denial of RBAC's carries no reason).
async fn can_i(c: &Ctx, args: &[&str]) -> anyhow::Result<bool> {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let r = c.run(&all).await?;
    match (r.code, r.stdout.trim()) {
        (Some(0), "yes") => Ok(true),
        (Some(1), "no") => Ok(false),
        _ => bail!(
            "`kubectl {}` exited {:?}: stdout {:?}, stderr {:?}",
            c.show(&all),
            r.code,
            r.stdout.trim(),
            c.gist(&r.stderr)
        ),
    }
}

/// Fails unless `kubectl auth can-i ARGS` answers `want` now.
async fn expect(c: &Ctx, args: &[&str], want: bool) -> anyhow::Result<()> {
    let got = can_i(c, args).await?;
    ensure!(
        got == want,
        "`kubectl auth can-i {}` answered {}, expected {}",
        c.show(args),
        yes_no(got),
        yes_no(want)
    );
    Ok(())
}

/// Polls until `kubectl auth can-i ARGS` answers `want`: after a write to RBAC objects.
async fn settles(c: &Ctx, args: &[&str], want: bool) -> anyhow::Result<()> {
    let what = format!(
        "`kubectl auth can-i {}` to answer {}",
        c.show(args),
        yes_no(want)
    );
    eventually(SETTLE, &what, || expect(c, args, want)).await
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// `kubectl get KIND NAME -o json`, parsed.
async fn get_json(c: &Ctx, kind: &str, name: &str) -> anyhow::Result<Value> {
    let out = c.ok(&["get", kind, name, "-o", "json"]).await?;
    serde_json::from_str(&out).with_context(|| format!("parsing {kind}/{name}"))
}

/// Fails unless `obj[field]` is `want`.
fn field_is(obj: &Value, field: &str, want: &Value) -> anyhow::Result<()> {
    let got = &obj[field];
    ensure!(
        got == want,
        "{}/{}: {field} is {got}, expected {want}",
        obj["kind"].as_str().unwrap_or("?"),
        obj["metadata"]["name"].as_str().unwrap_or("?")
    );
    Ok(())
}

/// The arguments that make kubectl a service account of the suite's namespace: a token of
/// its own and the admin's kubeconfig left out.
struct AsToken(Vec<String>);

impl AsToken {
    async fn new(c: &Ctx, sa: &str) -> anyhow::Result<AsToken> {
        let token = c.ok(&["create", "token", sa, "--duration=20m"]).await?;
        let server = c.server().await?;
        Ok(AsToken(vec![
            "--kubeconfig=/dev/null".into(),
            format!("--server={server}"),
            "--insecure-skip-tls-verify".into(),
            format!("--token={}", token.trim()),
            format!("--namespace={}", c.ns),
        ]))
    }

    fn args<'a>(&'a self, rest: &[&'a str]) -> Vec<&'a str> {
        self.0
            .iter()
            .map(String::as_str)
            .chain(rest.iter().copied())
            .collect()
    }
}

/// The line of `kubectl auth can-i --list` for `resource` (as kubectl joins it with its
/// group) without resource names: its verbs.
fn listed_verbs(out: &str, resource: &str) -> anyhow::Result<BTreeSet<String>> {
    for line in out.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 4 && cols[0] == resource && cols[1] == "[]" && cols[2] == "[]" {
            let verbs = cols[3..].join(" ");
            let verbs = verbs.trim_start_matches('[').trim_end_matches(']');
            return Ok(verbs.split_whitespace().map(str::to_string).collect());
        }
    }
    bail!(
        "no line for {resource} in `auth can-i --list`: {}",
        crate::support::one_line(out, 400)
    )
}

fn verbs(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|v| v.to_string()).collect()
}

/// `kubectl auth can-i` for the admin and for a service account impersonated with `--as`:
/// nothing before a binding; a Role limited to one resource name; then `view`, which leaves
/// out secrets and writes, in its namespace only; subresources, non-resource URLs and
/// `--list`.
pub async fn auth_can_i(c: &Ctx) -> anyhow::Result<()> {
    // system:masters may do anything anywhere.
    expect(c, &["create", "pods"], true).await?;
    expect(c, &["*", "*", "--all-namespaces"], true).await?;

    let ns = format!("--namespace={}", c.ns);
    let as_sa = format!("--as=system:serviceaccount:{}:nobody", c.ns);
    let subject = format!("--serviceaccount={}:nobody", c.ns);
    let sa = |args: &[&'static str]| -> Vec<String> {
        args.iter()
            .map(|a| a.to_string())
            .chain([as_sa.clone(), ns.clone()])
            .collect()
    };
    let ask = |args: &[&'static str], want: bool| {
        let all = sa(args);
        async move {
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            expect(c, &all, want).await
        }
    };
    let wait = |args: &[&'static str], want: bool| {
        let all = sa(args);
        async move {
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            settles(c, &all, want).await
        }
    };

    // A service account nothing is bound to: `no`, and exit status 1.
    let args = sa(&["auth", "can-i", "list", "secrets"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = c.run(&args).await?;
    ensure!(
        r.code == Some(1) && r.stdout.trim() == "no",
        "`kubectl {}` exited {:?} printing {:?} ({})",
        c.show(&args),
        r.code,
        r.stdout,
        c.gist(&r.stderr)
    );
    ask(&["get", "pods"], false).await?;
    // What every authenticated user may read (system:public-info-viewer), and what not.
    ask(&["get", "/healthz"], true).await?;
    ask(&["get", "/metrics"], false).await?;

    // A Role for one ConfigMap by name.
    c.ok(&[
        "create",
        "role",
        "cani-cm-one",
        "--verb=update",
        "--resource=configmaps",
        "--resource-name=one",
    ])
    .await?;
    c.ok(&[
        "create",
        "rolebinding",
        "cani-cm-one",
        "--role=cani-cm-one",
        &subject,
    ])
    .await?;
    wait(&["update", "configmaps/one"], true).await?;
    ask(&["update", "configmaps/two"], false).await?;
    ask(&["update", "configmaps"], false).await?;

    // `view` in the namespace: reads, but not secrets, no writes, nowhere else.
    c.ok(&[
        "create",
        "rolebinding",
        "cani-view",
        "--clusterrole=view",
        &subject,
    ])
    .await?;
    wait(&["get", "pods"], true).await?;
    ask(&["list", "pods"], true).await?;
    ask(&["list", "secrets"], false).await?;
    ask(&["delete", "pods"], false).await?;
    ask(&["list", "deployments.apps"], true).await?;
    ask(&["get", "pods", "--subresource=log"], true).await?;
    ask(&["create", "pods", "--subresource=exec"], false).await?;
    let everywhere = [
        "auth".to_string(),
        "can-i".into(),
        "get".into(),
        "pods".into(),
        as_sa.clone(),
        "--all-namespaces".into(),
    ];
    let everywhere: Vec<&str> = everywhere.iter().map(String::as_str).collect();
    let r = c.run(&everywhere).await?;
    ensure!(
        r.code == Some(1) && r.stdout.trim() == "no",
        "a RoleBinding granted pods across namespaces: {:?}",
        r.stdout
    );

    // The rules of a SelfSubjectRulesReview, in kubectl's table.
    let out = c.ok(&["auth", "can-i", "--list", &as_sa, &ns]).await?;
    ensure!(
        header(&out)
            == [
                "Resources",
                "Non-Resource",
                "URLs",
                "Resource",
                "Names",
                "Verbs"
            ],
        "header of `auth can-i --list`: {out}"
    );
    let got = listed_verbs(&out, "pods")?;
    ensure!(got == verbs(&["get", "list", "watch"]), "pods: {got:?}");
    let got = listed_verbs(&out, "deployments.apps")?;
    ensure!(
        got == verbs(&["get", "list", "watch"]),
        "deployments: {got:?}"
    );
    let got = listed_verbs(&out, "selfsubjectaccessreviews.authorization.k8s.io")?;
    ensure!(got.contains("create"), "selfsubjectaccessreviews: {got:?}");
    ensure!(
        out.lines().any(|l| {
            l.split_whitespace().collect::<Vec<_>>() == ["configmaps", "[]", "[one]", "[update]"]
        }),
        "no line for the named ConfigMap in `auth can-i --list`: {out}"
    );
    ensure!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["[/healthz]", "[]", "[get]"]),
        "no line for /healthz in `auth can-i --list`: {out}"
    );
    ensure!(
        !out.lines().any(|l| l.starts_with("secrets ")),
        "secrets listed for a view binding: {out}"
    );

    // Without its binding the service account loses what view gave.
    c.ok(&["delete", "rolebinding", "cani-view"]).await?;
    wait(&["get", "pods"], false).await?;
    ask(&["update", "configmaps/one"], true).await?;
    Ok(())
}

/// `kubectl auth whoami` (1.28 and later): the admin's own identity, and what an admin's
/// impersonation headers make of a user, a UID, groups and a service account.
pub async fn auth_whoami(c: &Ctx) -> anyhow::Result<()> {
    if c.bin.minor.is_some_and(|m| m < 28) {
        return Ok(());
    }
    let out = c.ok(&["auth", "whoami", "-o", "json"]).await?;
    let review: Value = serde_json::from_str(&out)?;
    ensure!(
        review["kind"] == "SelfSubjectReview"
            && review["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("authentication.k8s.io/")),
        "whoami: {out}"
    );
    let admin = review["status"]["userInfo"]["username"]
        .as_str()
        .filter(|u| !u.is_empty())
        .with_context(|| format!("no username in {out}"))?
        .to_string();
    let groups = review["status"]["userInfo"]["groups"].to_string();
    contains(&groups, "\"system:masters\"")?;
    contains(&groups, "\"system:authenticated\"")?;
    let table = c.ok(&["auth", "whoami"]).await?;
    ensure!(header(&table) == ["ATTRIBUTE", "VALUE"], "whoami: {table}");
    ensure!(
        row(&table, "Username")? == ["Username", admin.as_str()],
        "whoami: {table}"
    );
    contains(row(&table, "Groups")?.join(" ").as_str(), "system:masters")?;

    let user = format!("jane-{}", c.bin.tag);
    let as_user = format!("--as={user}");
    let out = c
        .ok(&[
            "auth",
            "whoami",
            &as_user,
            "--as-group=dev",
            "--as-group=ops",
            "--as-uid=1234",
            "-o",
            "json",
        ])
        .await?;
    let review: Value = serde_json::from_str(&out)?;
    let info = &review["status"]["userInfo"];
    ensure!(
        info["username"] == user.as_str()
            && info["uid"] == "1234"
            && info["groups"] == json!(["dev", "ops", "system:authenticated"]),
        "whoami as {user}: {out}"
    );
    let table = c
        .ok(&[
            "auth",
            "whoami",
            &as_user,
            "--as-group=dev",
            "--as-uid=1234",
        ])
        .await?;
    ensure!(
        row(&table, "Username")? == ["Username", user.as_str()]
            && row(&table, "UID")? == ["UID", "1234"]
            && row(&table, "Groups")? == ["Groups", "[dev", "system:authenticated]"],
        "whoami as {user}: {table}"
    );

    // A service account's name brings its groups.
    let sa = format!("system:serviceaccount:{}:nobody", c.ns);
    let out = c
        .ok(&["auth", "whoami", &format!("--as={sa}"), "-o", "json"])
        .await?;
    let review: Value = serde_json::from_str(&out)?;
    let info = &review["status"]["userInfo"];
    let want = json!([
        "system:serviceaccounts",
        format!("system:serviceaccounts:{}", c.ns),
        "system:authenticated"
    ]);
    ensure!(
        info["username"] == sa.as_str() && info["groups"] == want,
        "whoami as {sa}: {out}"
    );
    Ok(())
}

fn role(name: &str, namespace: Option<&str>, rules: Value) -> Value {
    let mut meta = json!({"name": name});
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": meta, "rules": rules})
}

fn binding(name: &str, namespace: &str, role_ref: Value, users: &[&str]) -> Value {
    let subjects: Vec<Value> = users
        .iter()
        .map(|u| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u}))
        .collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": name, "namespace": namespace}, "roleRef": role_ref,
           "subjects": subjects})
}

fn role_ref(kind: &str, name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})
}

/// Runs `kubectl auth reconcile -f FILE EXTRA...`; fails unless it printed both objects as
/// reconciled; returns what it wrote to stderr (what it changed).
async fn reconcile(c: &Ctx, file: &str, extra: &[&str]) -> anyhow::Result<String> {
    let mut args = vec!["auth", "reconcile", "-f", file];
    args.extend_from_slice(extra);
    let r = c.run(&args).await?;
    ensure!(
        r.ok(),
        "`kubectl {}` exited {:?}: {}",
        c.show(&args),
        r.code,
        c.gist(&r.stderr)
    );
    contains(&r.stdout, "role.rbac.authorization.k8s.io/recon reconciled")?;
    contains(
        &r.stdout,
        "rolebinding.rbac.authorization.k8s.io/recon reconciled",
    )?;
    Ok(r.stderr)
}

/// `kubectl auth reconcile`: creates what is missing, adds missing rules and subjects, leaves
/// extra ones unless told to remove them, recreates a binding whose roleRef changed, and
/// creates the namespace of a Role that names a missing one.
pub async fn auth_reconcile(c: &Ctx) -> anyhow::Result<()> {
    let cm_get = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]);
    let secret_get = json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]});
    let mut both = cm_get.clone();
    both.as_array_mut().expect("an array").push(secret_get);
    let manifest = |rules: &Value, role_ref: Value, users: &[&str]| {
        format!(
            "{}---\n{}",
            // kubectl auth reconcile takes the namespace from each object.
            yaml(&role("recon", Some(&c.ns), rules.clone())),
            yaml(&binding("recon", &c.ns, role_ref, users))
        )
    };
    let v1 = c.write(
        "reconcile-v1.yaml",
        &manifest(&cm_get, role_ref("Role", "recon"), &["alice"]),
    )?;
    let v2 = c.write(
        "reconcile-v2.yaml",
        &manifest(&both, role_ref("Role", "recon"), &["alice", "bob"]),
    )?;
    let alice = json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]);

    let err = reconcile(c, &v1, &[]).await?;
    contains(&err, "reconciliation required create")?;
    contains(&err, "missing rules added:")?;
    contains(&err, "missing subjects added:")?;
    field_is(&get_json(c, "role", "recon").await?, "rules", &cm_get)?;
    let rb = get_json(c, "rolebinding", "recon").await?;
    field_is(&rb, "subjects", &alice)?;
    field_is(&rb, "roleRef", &role_ref("Role", "recon"))?;

    // Nothing to do the second time.
    let err = reconcile(c, &v1, &[]).await?;
    ensure!(
        !err.contains("reconciliation required"),
        "a second reconcile changed something: {err}"
    );

    // A rule and a subject more are added.
    let err = reconcile(c, &v2, &[]).await?;
    contains(&err, "reconciliation required update")?;
    contains(&err, "missing rules added:")?;
    contains(&err, "Resources:[secrets]")?;
    contains(&err, "missing subjects added:")?;
    contains(&err, "Name:bob")?;
    field_is(&get_json(c, "role", "recon").await?, "rules", &both)?;
    let subjects = &get_json(c, "rolebinding", "recon").await?["subjects"];
    ensure!(
        subjects.as_array().map(Vec::len) == Some(2) && subjects[1]["name"] == "bob",
        "subjects after the update: {subjects}"
    );

    // The smaller file keeps what is there, unless extras are removed.
    let err = reconcile(c, &v1, &[]).await?;
    ensure!(
        !err.contains("reconciliation required"),
        "reconcile removed extras unasked: {err}"
    );
    field_is(&get_json(c, "role", "recon").await?, "rules", &both)?;
    let err = reconcile(
        c,
        &v1,
        &["--remove-extra-permissions", "--remove-extra-subjects"],
    )
    .await?;
    contains(&err, "reconciliation required update")?;
    contains(&err, "extra rules removed:")?;
    contains(&err, "extra subjects removed:")?;
    field_is(&get_json(c, "role", "recon").await?, "rules", &cm_get)?;
    field_is(
        &get_json(c, "rolebinding", "recon").await?,
        "subjects",
        &alice,
    )?;

    // A roleRef cannot change: the binding is deleted (UID precondition) and created again.
    let before = get_json(c, "rolebinding", "recon").await?;
    let v3 = c.write(
        "reconcile-v3.yaml",
        &manifest(&cm_get, role_ref("ClusterRole", "view"), &["alice"]),
    )?;
    let err = reconcile(c, &v3, &[]).await?;
    contains(&err, "reconciliation required recreate")?;
    let after = get_json(c, "rolebinding", "recon").await?;
    field_is(&after, "roleRef", &role_ref("ClusterRole", "view"))?;
    ensure!(
        after["metadata"]["uid"] != before["metadata"]["uid"],
        "the binding was not recreated: uid {}",
        after["metadata"]["uid"]
    );

    // A Role in a namespace that does not exist yet: reconcile creates the namespace.
    let other = c.extra_ns("reconcile");
    let _ = c
        .run(&[
            "delete",
            "namespace",
            &other,
            "--ignore-not-found",
            "--wait=true",
        ])
        .await?;
    let file = c.write(
        "reconcile-ns.yaml",
        &yaml(&role("elsewhere", Some(&other), cm_get.clone())),
    )?;
    let r = c.run(&["auth", "reconcile", "-f", &file]).await?;
    ensure!(
        r.ok(),
        "reconcile into a new namespace: {}",
        c.gist(&r.stderr)
    );
    contains(
        &r.stdout,
        "role.rbac.authorization.k8s.io/elsewhere reconciled",
    )?;
    c.ok(&["get", "namespace", &other]).await?;
    let out = c
        .ok(&["get", "role", "elsewhere", "-n", &other, "-o", "name"])
        .await?;
    contains(&out, "role.rbac.authorization.k8s.io/elsewhere")?;
    c.ok(&["delete", "namespace", &other, "--wait=false"])
        .await?;
    Ok(())
}
