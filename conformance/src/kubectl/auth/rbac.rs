//! `kubectl create role|rolebinding|clusterrole|clusterrolebinding` and the escalation check
//! behind them: what a service account may grant depends on what it holds, read through the
//! authorizer's caches, so each grant that follows a new binding polls.

use anyhow::ensure;
use serde_json::json;

use super::{AsToken, SETTLE, expect, field_is, get_json, role_ref, settles};
use crate::kubectl::Ctx;
use crate::support::{contains, eventually};

/// `kubectl create role|rolebinding|clusterrole|clusterrolebinding`: the objects kubectl
/// builds, an aggregated ClusterRole the controller fills and a binding to it that RBAC
/// honours, and the escalation check on a service account that may only create roles and
/// bindings.
pub async fn create_rbac(c: &Ctx) -> anyhow::Result<()> {
    let suffix = format!("{}-{}", c.bin.tag, c.env.run);
    let agg = format!("conf-agg-{suffix}");
    let part = format!("conf-agg-part-{suffix}");
    let nonres = format!("conf-nonres-{suffix}");
    let crb = format!("conf-crb-{suffix}");
    for (kind, name) in [
        ("clusterrole", &agg),
        ("clusterrole", &part),
        ("clusterrole", &nonres),
        ("clusterrolebinding", &crb),
    ] {
        c.ok(&["delete", kind, name, "--ignore-not-found"]).await?;
    }
    let result = create_rbac_objects(c, &suffix, [&agg, &part, &nonres, &crb]).await;
    let result = match result {
        Ok(()) => escalation(c).await,
        e => e,
    };
    for (kind, name) in [
        ("clusterrolebinding", &crb),
        ("clusterrole", &agg),
        ("clusterrole", &part),
        ("clusterrole", &nonres),
    ] {
        let _ = c.run(&["delete", kind, name, "--ignore-not-found"]).await;
    }
    result
}

async fn create_rbac_objects(
    c: &Ctx,
    suffix: &str,
    [agg, part, nonres, crb]: [&String; 4],
) -> anyhow::Result<()> {
    let out = c
        .ok(&[
            "create",
            "role",
            "pod-reader",
            "--verb=get,list",
            "--resource=pods",
        ])
        .await?;
    contains(&out, "role.rbac.authorization.k8s.io/pod-reader created")?;
    field_is(
        &get_json(c, "role", "pod-reader").await?,
        "rules",
        &json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]),
    )?;
    // One rule per API group, short names resolved by discovery, a subresource, a name.
    c.ok(&[
        "create",
        "role",
        "multi",
        "--verb=get",
        "--resource=pods,pods/log,deployments.apps,rs",
        "--resource-name=a",
    ])
    .await?;
    field_is(
        &get_json(c, "role", "multi").await?,
        "rules",
        &json!([
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "resourceNames": ["a"], "verbs": ["get"]},
            {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "resourceNames": ["a"], "verbs": ["get"]}
        ]),
    )?;

    let sa_subject = format!("--serviceaccount={}:reader", c.ns);
    let out = c
        .ok(&[
            "create",
            "rolebinding",
            "pod-reader",
            "--role=pod-reader",
            "--user=alice",
            "--group=readers",
            &sa_subject,
        ])
        .await?;
    contains(
        &out,
        "rolebinding.rbac.authorization.k8s.io/pod-reader created",
    )?;
    let rb = get_json(c, "rolebinding", "pod-reader").await?;
    field_is(&rb, "roleRef", &role_ref("Role", "pod-reader"))?;
    field_is(
        &rb,
        "subjects",
        &json!([
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "readers"},
            {"kind": "ServiceAccount", "name": "reader", "namespace": c.ns}
        ]),
    )?;
    settles(c, &["get", "pods", "--as=alice"], true).await?;
    expect(c, &["list", "pods", "--as=bob", "--as-group=readers"], true).await?;
    expect(c, &["delete", "pods", "--as=alice"], false).await?;
    expect(c, &["get", "pods", "--as=bob"], false).await?;

    // An aggregated ClusterRole: empty until a labelled ClusterRole feeds it.
    let label = format!("conformance.minik8s.io/agg-{suffix}");
    let out = c
        .ok(&[
            "create",
            "clusterrole",
            agg,
            &format!("--aggregation-rule={label}=true"),
        ])
        .await?;
    contains(
        &out,
        &format!("clusterrole.rbac.authorization.k8s.io/{agg} created"),
    )?;
    field_is(
        &get_json(c, "clusterrole", agg).await?,
        "aggregationRule",
        &json!({"clusterRoleSelectors": [{"matchLabels": {label.as_str(): "true"}}]}),
    )?;
    c.ok(&[
        "create",
        "clusterrole",
        part,
        "--verb=get,list",
        "--resource=configmaps",
    ])
    .await?;
    c.ok(&["label", "clusterrole", part, &format!("{label}=true")])
        .await?;
    let want = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]);
    eventually(SETTLE, "the aggregated rules", || async {
        field_is(&get_json(c, "clusterrole", agg).await?, "rules", &want)
    })
    .await?;

    let user = format!("agg-user-{}", c.bin.tag);
    let out = c
        .ok(&[
            "create",
            "clusterrolebinding",
            crb,
            &format!("--clusterrole={agg}"),
            &format!("--user={user}"),
        ])
        .await?;
    contains(
        &out,
        &format!("clusterrolebinding.rbac.authorization.k8s.io/{crb} created"),
    )?;
    let b = get_json(c, "clusterrolebinding", crb).await?;
    field_is(&b, "roleRef", &role_ref("ClusterRole", agg))?;
    field_is(
        &b,
        "subjects",
        &json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]),
    )?;
    // The aggregated rules hold in every namespace.
    let as_user = format!("--as={user}");
    settles(
        c,
        &["list", "configmaps", &as_user, "--all-namespaces"],
        true,
    )
    .await?;
    expect(
        c,
        &["delete", "configmaps", &as_user, "-n", "default"],
        false,
    )
    .await?;

    c.ok(&[
        "create",
        "clusterrole",
        nonres,
        "--verb=get",
        "--non-resource-url=/logs/*",
    ])
    .await?;
    field_is(
        &get_json(c, "clusterrole", nonres).await?,
        "rules",
        &json!([{"nonResourceURLs": ["/logs/*"], "verbs": ["get"]}]),
    )?;
    Ok(())
}

/// A service account allowed only to create Roles and RoleBindings cannot grant what it does
/// not hold (upstream's message, naming the missing rules), may grant what it does hold, and
/// may grant anything once it has `escalate` on roles.
async fn escalation(c: &Ctx) -> anyhow::Result<()> {
    let sa = "limited";
    let user = format!("system:serviceaccount:{}:{sa}", c.ns);
    let subject = format!("--serviceaccount={}:{sa}", c.ns);
    c.ok(&["create", "serviceaccount", sa]).await?;
    c.ok(&[
        "create",
        "role",
        "rbac-writer",
        "--verb=create",
        "--resource=roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io",
    ])
    .await?;
    c.ok(&[
        "create",
        "rolebinding",
        "rbac-writer",
        "--role=rbac-writer",
        &subject,
    ])
    .await?;
    let token = AsToken::new(c, sa).await?;
    settles(
        c,
        &token.args(&["create", "roles.rbac.authorization.k8s.io"]),
        true,
    )
    .await?;

    let err = c
        .fails(&token.args(&[
            "create",
            "role",
            "secret-reader",
            "--verb=get",
            "--resource=secrets",
        ]))
        .await?;
    contains(
        &err,
        &format!(
            "roles.rbac.authorization.k8s.io \"secret-reader\" is forbidden: user \"{user}\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:{}\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:",
            c.ns
        ),
    )?;
    contains(
        &err,
        "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}",
    )?;
    let r = c.run(&["get", "role", "secret-reader"]).await?;
    ensure!(!r.ok(), "a refused role was stored");

    // What it holds it may grant.
    let out = c
        .ok(&token.args(&[
            "create",
            "role",
            "role-maker",
            "--verb=create",
            "--resource=roles.rbac.authorization.k8s.io",
        ]))
        .await?;
    contains(&out, "role.rbac.authorization.k8s.io/role-maker created")?;
    // The check reads the new Role through the authorizer's cache.
    let bind = token.args(&[
        "create",
        "rolebinding",
        "role-maker",
        "--role=role-maker",
        &subject,
    ]);
    eventually(SETTLE, "a binding to a role the account holds", || {
        c.ok(&bind)
    })
    .await?;
    // A binding to a role it does not hold is an escalation too.
    let err = c
        .fails(&token.args(&[
            "create",
            "rolebinding",
            "sneaky",
            "--clusterrole=view",
            &subject,
        ]))
        .await?;
    contains(
        &err,
        &format!("rolebindings.rbac.authorization.k8s.io \"sneaky\" is forbidden: user \"{user}\""),
    )?;
    contains(
        &err,
        "is attempting to grant RBAC permissions not currently held:",
    )?;

    // `escalate` on roles lifts the check for roles.
    c.ok(&[
        "create",
        "role",
        "rbac-escalator",
        "--verb=escalate",
        "--resource=roles.rbac.authorization.k8s.io",
    ])
    .await?;
    c.ok(&[
        "create",
        "rolebinding",
        "rbac-escalator",
        "--role=rbac-escalator",
        &subject,
    ])
    .await?;
    settles(
        c,
        &token.args(&["escalate", "roles.rbac.authorization.k8s.io"]),
        true,
    )
    .await?;
    let out = c
        .ok(&token.args(&[
            "create",
            "role",
            "secret-reader",
            "--verb=get",
            "--resource=secrets",
        ]))
        .await?;
    contains(&out, "role.rbac.authorization.k8s.io/secret-reader created")?;
    Ok(())
}
