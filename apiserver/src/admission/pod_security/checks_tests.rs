//! Upstream's cases: the exact reasons and details of `policy/check_*_test.go`, and the
//! order in which a level reports them.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;
use crate::admission::pod_security::api::{Level, LevelVersion, Version};
use crate::admission::pod_security::evaluator::Evaluator;

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).expect("pod")
}

type Check = fn(&ObjectMeta, &PodSpec) -> Outcome;

/// `check` on `v`: `None` when allowed, else (reason, detail).
fn run(check: Check, v: Value) -> Option<(String, String)> {
    let p = pod(v);
    check(&p.metadata, p.spec.as_ref().expect("spec")).map(|f| (f.reason, f.detail))
}

fn refused(reason: &str, detail: &str) -> Option<(String, String)> {
    Some((reason.to_string(), detail.to_string()))
}

fn c(name: &str, sc: Value) -> Value {
    json!({"name": name, "securityContext": sc})
}

#[test]
fn allow_privilege_escalation() {
    let containers = json!([
        {"name": "a"},
        c("b", json!({})),
        c("c", json!({"allowPrivilegeEscalation": true})),
        c("d", json!({"allowPrivilegeEscalation": false})),
    ]);
    let want = refused(
        "allowPrivilegeEscalation != false",
        r#"containers "a", "b", "c" must set securityContext.allowPrivilegeEscalation=false"#,
    );
    let spec = json!({"spec": {"containers": containers}});
    assert_eq!(run(allow_privilege_escalation_1_8, spec.clone()), want);
    assert_eq!(run(allow_privilege_escalation_1_25, spec), want);
    let windows = json!({"spec": {"os": {"name": "windows"}, "containers": [{"name": "a"}]}});
    assert_eq!(run(allow_privilege_escalation_1_25, windows.clone()), None);
    assert!(run(allow_privilege_escalation_1_8, windows).is_some());
    let linux = json!({"spec": {"os": {"name": "linux"}, "containers": [{"name": "a"}]}});
    assert_eq!(
        run(allow_privilege_escalation_1_25, linux),
        refused(
            "allowPrivilegeEscalation != false",
            r#"container "a" must set securityContext.allowPrivilegeEscalation=false"#
        )
    );
}

#[test]
fn app_armor_profiles() {
    for allowed in [
        json!({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/test": "runtime/default", "env": "prod"}}, "spec": {"containers": []}}),
        json!({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/test": "localhost/sec-profile01"}}, "spec": {"containers": []}}),
        json!({"spec": {"containers": [], "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}}),
        json!({"spec": {"containers": [c("foo", json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}))]}}),
    ] {
        assert_eq!(run(app_armor, allowed.clone()), None, "{allowed}");
    }
    assert_eq!(
        run(
            app_armor,
            json!({"spec": {"containers": [], "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}})
        ),
        refused(
            "forbidden AppArmor profile",
            r#"pod must not set AppArmor profile type to "Unconfined""#
        )
    );
    assert_eq!(
        run(
            app_armor,
            json!({"spec": {
                "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "foo"}],
                "initContainers": [c("bar", json!({"appArmorProfile": {"type": "Unconfined"}}))]
            }})
        ),
        refused(
            "forbidden AppArmor profile",
            r#"container "bar" must not set AppArmor profile type to "Unconfined""#
        )
    );
    let annotations = json!({
        "container.apparmor.security.beta.kubernetes.io/": "bogus",
        "container.apparmor.security.beta.kubernetes.io/a": "",
        "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
        "container.apparmor.security.beta.kubernetes.io/c": "localhost/",
        "container.apparmor.security.beta.kubernetes.io/d": "localhost/foo",
        "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/f": "unknown",
    });
    assert_eq!(
        run(
            app_armor,
            json!({"metadata": {"annotations": annotations}, "spec": {"containers": []}})
        ),
        refused(
            "forbidden AppArmor profiles",
            concat!(
                r#"annotations must not set AppArmor profile type to "#,
                r#""container.apparmor.security.beta.kubernetes.io/="bogus"", "#,
                r#""container.apparmor.security.beta.kubernetes.io/e="unconfined"", "#,
                r#""container.apparmor.security.beta.kubernetes.io/f="unknown"""#
            )
        )
    );
}

#[test]
fn capabilities() {
    let spec = json!({"spec": {"containers": [
        c("a", json!({"capabilities": {"add": ["FOO", "BAR"]}})),
        c("b", json!({"capabilities": {"add": ["BAR", "BAZ"]}})),
    ]}});
    assert_eq!(
        run(capabilities_baseline, spec),
        refused(
            "non-default capabilities",
            r#"containers "a", "b" must not include "BAR", "BAZ", "FOO" in securityContext.capabilities.add"#
        )
    );
    let spec = json!({"spec": {"containers": [
        c("a", json!({"capabilities": {"add": ["FOO", "BAR"]}})),
        c("b", json!({"capabilities": {"add": ["BAR", "BAZ"]}})),
        c("c", json!({"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}})),
    ]}});
    let want = refused(
        "unrestricted capabilities",
        r#"containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers "a", "b", "c" must not include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add"#,
    );
    assert_eq!(run(capabilities_restricted_1_22, spec.clone()), want);
    assert_eq!(run(capabilities_restricted, spec), want);
    let windows = json!({"spec": {"os": {"name": "windows"}, "containers": [{"name": "a"}]}});
    assert_eq!(run(capabilities_restricted, windows), None);
    assert_eq!(
        run(
            capabilities_restricted,
            json!({"spec": {"os": {"name": "linux"}, "containers": [{"name": "a"}]}})
        ),
        refused(
            "unrestricted capabilities",
            r#"container "a" must set securityContext.capabilities.drop=["ALL"]"#
        )
    );
}

#[test]
fn host_namespaces_and_ports_and_paths() {
    assert_eq!(
        run(
            host_namespaces,
            json!({"spec": {"containers": [], "hostNetwork": true, "hostIPC": true, "hostPID": true}})
        ),
        refused(
            "host namespaces",
            "hostNetwork=true, hostPID=true, hostIPC=true"
        )
    );
    assert_eq!(
        run(
            host_path_volumes,
            json!({"spec": {"containers": [], "volumes": [
                {"name": "a", "hostPath": {"path": "/a"}},
                {"name": "b", "hostPath": {"path": "/b"}},
                {"name": "c", "emptyDir": {}},
            ]}})
        ),
        refused("hostPath volumes", r#"volumes "a", "b""#)
    );
    assert_eq!(
        run(
            host_ports,
            json!({"spec": {"containers": [
                {"name": "a", "ports": [{"containerPort": 1, "hostPort": 0}]},
                {"name": "b", "ports": [{"containerPort": 1, "hostPort": 0}, {"containerPort": 2, "hostPort": 20}]},
            ]}})
        ),
        refused("hostPort", r#"container "b" uses hostPort 20"#)
    );
    assert_eq!(
        run(
            host_ports,
            json!({"spec": {"containers": [
                {"name": "a", "ports": [{"containerPort": 1}]},
                {"name": "b", "ports": [{"containerPort": 1, "hostPort": 10}, {"containerPort": 2, "hostPort": 20}]},
                {"name": "c", "ports": [{"containerPort": 1, "hostPort": 10}, {"containerPort": 2, "hostPort": 30}]},
            ]}})
        ),
        refused(
            "hostPort",
            r#"containers "b", "c" use hostPorts 10, 20, 30"#
        )
    );
}

#[test]
fn host_probes_and_lifecycle_hosts() {
    let probe = |kind: &str, host: &str| json!({kind: {"host": host, "port": 8080}});
    assert_eq!(
        run(
            host_probes_and_lifecycle,
            json!({"spec": {"containers": [{"name": "a",
                "livenessProbe": {"httpGet": {"port": 80}},
                "readinessProbe": {"tcpSocket": {"port": 80}},
                "lifecycle": {"postStart": {"httpGet": {"port": 80}}}}]}})
        ),
        None
    );
    assert_eq!(
        run(
            host_probes_and_lifecycle,
            json!({"spec": {"containers": [{"name": "a",
                "livenessProbe": probe("httpGet", "127.0.0.1"),
                "readinessProbe": probe("tcpSocket", "::1"),
                "startupProbe": probe("httpGet", "localhost")}]}})
        ),
        refused(
            "probe or lifecycle host",
            r#"container "a" uses probe or lifecycle hosts "127.0.0.1", "::1", "localhost""#
        )
    );
    assert_eq!(
        run(
            host_probes_and_lifecycle,
            json!({"spec": {"containers": [
                {"name": "valid"},
                {"name": "invalid1", "livenessProbe": probe("httpGet", "a.com")},
                {"name": "invalid2",
                 "lifecycle": {"preStop": probe("tcpSocket", "b.com")},
                 "startupProbe": probe("httpGet", "a.com")},
            ]}})
        ),
        refused(
            "probe or lifecycle host",
            r#"containers "invalid1", "invalid2" use probe or lifecycle hosts "a.com", "b.com""#
        )
    );
    assert_eq!(
        run(
            host_probes_and_lifecycle,
            json!({"spec": {"containers": [], "initContainers": [
                {"name": "init", "livenessProbe": probe("httpGet", "invalid.init.host")}]}})
        ),
        refused(
            "probe or lifecycle host",
            r#"container "init" uses probe or lifecycle host "invalid.init.host""#
        )
    );
}

#[test]
fn privileged_containers() {
    assert_eq!(
        run(
            privileged,
            json!({"spec": {"containers": [
                {"name": "a"},
                c("b", json!({})),
                c("c", json!({"privileged": false})),
                c("d", json!({"privileged": true})),
                c("e", json!({"privileged": true})),
            ]}})
        ),
        refused(
            "privileged",
            r#"containers "d", "e" must not set securityContext.privileged=true"#
        )
    );
}

#[test]
fn proc_mounts() {
    let spec = |host_users: bool| {
        json!({"spec": {"hostUsers": host_users, "containers": [
            {"name": "a"},
            c("b", json!({})),
            c("c", json!({"procMount": "Default"})),
            c("d", json!({"procMount": "Unmasked"})),
            c("e", json!({"procMount": "other"})),
        ]}})
    };
    let want = refused(
        "procMount",
        r#"containers "d", "e" must not set securityContext.procMount to "Unmasked", "other""#,
    );
    assert_eq!(run(proc_mount_1_35, spec(true)), want);
    assert_eq!(run(proc_mount_1_35, spec(false)), None);
    assert_eq!(run(proc_mount_1_0, spec(false)), want);
    assert_eq!(run(proc_mount_1_0, spec(true)), want);
}

#[test]
fn restricted_volume_types() {
    let volumes = json!([
        {"name": "a1", "emptyDir": {}},
        {"name": "a2", "secret": {}},
        {"name": "a3", "persistentVolumeClaim": {"claimName": "x"}},
        {"name": "a4", "downwardAPI": {}},
        {"name": "a5", "configMap": {}},
        {"name": "a6", "projected": {}},
        {"name": "a7", "csi": {"driver": "d"}},
        {"name": "a8", "ephemeral": {}},
        {"name": "a9", "image": {}},
        {"name": "b1", "hostPath": {"path": "/"}},
        {"name": "b2", "gcePersistentDisk": {"pdName": "x"}},
        {"name": "b3", "awsElasticBlockStore": {"volumeID": "x"}},
        {"name": "b4", "gitRepo": {"repository": "x"}},
        {"name": "b5", "nfs": {"server": "x", "path": "/"}},
        {"name": "b6", "iscsi": {"targetPortal": "x", "iqn": "x", "lun": 0}},
        {"name": "b7", "glusterfs": {"endpoints": "x", "path": "x"}},
        {"name": "b8", "rbd": {"monitors": ["x"], "image": "x"}},
        {"name": "b9", "flexVolume": {"driver": "x"}},
        {"name": "b10", "cinder": {"volumeID": "x"}},
        {"name": "b11", "cephfs": {"monitors": ["x"]}},
        {"name": "b12", "flocker": {}},
        {"name": "b13", "fc": {}},
        {"name": "b14", "azureFile": {"secretName": "x", "shareName": "x"}},
        {"name": "b15", "vsphereVolume": {"volumePath": "x"}},
        {"name": "b16", "quobyte": {"registry": "x", "volume": "x"}},
        {"name": "b17", "azureDisk": {"diskName": "x", "diskURI": "x"}},
        {"name": "b18", "photonPersistentDisk": {"pdID": "x"}},
        {"name": "b19", "portworxVolume": {"volumeID": "x"}},
        {"name": "b20", "scaleIO": {"gateway": "x", "system": "x", "secretRef": {}}},
        {"name": "b21", "storageos": {}},
        {"name": "c1"},
    ]);
    assert_eq!(
        run(
            restricted_volumes,
            json!({"spec": {"containers": [], "volumes": volumes}})
        ),
        refused(
            "restricted volume types",
            concat!(
                r#"volumes "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9", "b10", "b11", "b12", "b13", "b14", "b15", "b16", "b17", "b18", "b19", "b20", "b21", "c1""#,
                r#" use restricted volume types "#,
                r#""awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "#,
                r#""hostPath", "iscsi", "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "unknown", "vsphereVolume""#
            )
        )
    );
}

#[test]
fn run_as_non_root_and_user() {
    let reason = "runAsNonRoot != true";
    assert_eq!(
        run(
            run_as_non_root_1_35,
            json!({"spec": {"containers": [{"name": "a"}]}})
        ),
        refused(
            reason,
            r#"pod or container "a" must set securityContext.runAsNonRoot=true"#
        )
    );
    assert_eq!(
        run(
            run_as_non_root_1_35,
            json!({"spec": {"securityContext": {"runAsNonRoot": false}, "containers": [{"name": "a"}]}})
        ),
        refused(
            reason,
            "pod must not set securityContext.runAsNonRoot=false"
        )
    );
    assert_eq!(
        run(
            run_as_non_root_1_35,
            json!({"spec": {"securityContext": {"runAsNonRoot": true}, "containers": [
                {"name": "a"},
                c("b", json!({})),
                c("c", json!({"runAsNonRoot": false})),
                c("d", json!({"runAsNonRoot": false})),
            ]}})
        ),
        refused(
            reason,
            r#"containers "c", "d" must not set securityContext.runAsNonRoot=false"#
        )
    );
    assert_eq!(
        run(
            run_as_non_root_1_35,
            json!({"spec": {"containers": [
                {"name": "a"},
                c("b", json!({})),
                c("c", json!({"runAsNonRoot": true})),
            ]}})
        ),
        refused(
            reason,
            r#"pod or containers "a", "b" must set securityContext.runAsNonRoot=true"#
        )
    );
    let userns = json!({"spec": {"hostUsers": false, "containers": [{"name": "a"}]}});
    assert_eq!(run(run_as_non_root_1_35, userns.clone()), None);
    assert!(run(run_as_non_root_1_0, userns.clone()).is_some());

    assert_eq!(
        run(
            run_as_user_1_35,
            json!({"spec": {"securityContext": {"runAsUser": 0}, "containers": [{"name": "a"}]}})
        ),
        refused("runAsUser=0", "pod must not set runAsUser=0")
    );
    for fine in [json!(1000), Value::Null] {
        let spec = json!({"spec": {"securityContext": {"runAsUser": fine}, "containers": [{"name": "a"}]}});
        assert_eq!(run(run_as_user_1_35, spec), None);
    }
    assert_eq!(
        run(
            run_as_user_1_35,
            json!({"spec": {"containers": [
                {"name": "a"},
                c("b", json!({})),
                c("c", json!({"runAsUser": 0})),
                c("d", json!({"runAsUser": 0})),
                c("e", json!({"runAsUser": 1})),
            ]}})
        ),
        refused(
            "runAsUser=0",
            r#"containers "c", "d" must not set runAsUser=0"#
        )
    );
    let root_userns = json!({"spec": {"hostUsers": false, "securityContext": {"runAsUser": 0}, "containers": [{"name": "a"}]}});
    assert_eq!(run(run_as_user_1_35, root_userns.clone()), None);
    assert!(run(run_as_user_1_23, root_userns).is_some());
}

#[test]
fn se_linux_options() {
    let t = |ty: &str| json!({"seLinuxOptions": {"type": ty}});
    let all = json!({"spec": {
    "securityContext": {"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}},
    "containers": [
        c("a", t("container_t")),
        c("b", t("container_init_t")),
        c("c", t("container_kvm_t")),
        c("d", t("container_engine_t")),
        c("e", t("bar")),
        c("f", json!({"seLinuxOptions": {"user": "bar"}})),
        c("g", json!({"seLinuxOptions": {"role": "baz"}})),
    ]}});
    assert_eq!(
        run(se_linux_1_31, all.clone()),
        refused(
            "seLinuxOptions",
            r#"pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: types "bar", "foo"; user may not be set; role may not be set"#
        )
    );
    // container_engine_t is allowed from 1.31 only.
    assert_eq!(
        run(se_linux_1_0, all),
        refused(
            "seLinuxOptions",
            r#"pod and containers "d", "e", "f", "g" set forbidden securityContext.seLinuxOptions: types "bar", "container_engine_t", "foo"; user may not be set; role may not be set"#
        )
    );
    for (opts, detail) in [
        (
            json!({"type": "bad"}),
            r#"pod set forbidden securityContext.seLinuxOptions: type "bad""#,
        ),
        (
            json!({"user": "bad"}),
            "pod set forbidden securityContext.seLinuxOptions: user may not be set",
        ),
        (
            json!({"role": "bad"}),
            "pod set forbidden securityContext.seLinuxOptions: role may not be set",
        ),
    ] {
        let spec = json!({"spec": {"securityContext": {"seLinuxOptions": opts}, "containers": []}});
        assert_eq!(run(se_linux_1_31, spec), refused("seLinuxOptions", detail));
    }
}

#[test]
fn seccomp_profiles() {
    let annotated = |a: Value| json!({"metadata": {"annotations": a}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
    assert_eq!(
        run(
            seccomp_baseline_1_0,
            annotated(json!({"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}))
        ),
        refused(
            "seccompProfile",
            r#"forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined""#
        )
    );
    assert_eq!(
        run(
            seccomp_baseline_1_0,
            annotated(json!({
                "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
                "container.seccomp.security.alpha.kubernetes.io/a": "unconfined",
                "container.seccomp.security.alpha.kubernetes.io/b": "unknown",
            }))
        ),
        refused(
            "seccompProfile",
            r#"forbidden annotations container.seccomp.security.alpha.kubernetes.io/a="unconfined", container.seccomp.security.alpha.kubernetes.io/b="unknown", seccomp.security.alpha.kubernetes.io/pod="unconfined""#
        )
    );
    let unconfined = json!({"seccompProfile": {"type": "Unconfined"}});
    let bad = json!({"spec": {
    "securityContext": unconfined,
    "containers": [
        {"name": "a"},
        c("b", json!({})),
        c("c", unconfined.clone()),
        c("d", unconfined.clone()),
        c("e", json!({"seccompProfile": {"type": "RuntimeDefault"}})),
    ]}});
    let want = refused(
        "seccompProfile",
        r#"pod and containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
    );
    assert_eq!(run(seccomp_baseline_1_19, bad.clone()), want);
    assert_eq!(run(seccomp_restricted_1_25, bad), want);
    let implicit = json!({"spec": {"containers": [
        {"name": "a"},
        c("b", json!({})),
        c("c", json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}})),
    ]}});
    assert_eq!(run(seccomp_baseline_1_19, implicit.clone()), None);
    assert_eq!(
        run(seccomp_restricted_1_25, implicit),
        refused(
            "seccompProfile",
            r#"pod or containers "a", "b" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#
        )
    );
    let windows = json!({"spec": {"os": {"name": "windows"}, "containers": [{"name": "a"}]}});
    assert_eq!(run(seccomp_restricted_1_25, windows.clone()), None);
    assert!(run(seccomp_restricted_1_19, windows).is_some());
}

#[test]
fn sysctl_allow_lists_grow_by_version() {
    let spec = |names: &[&str]| {
        let sysctls: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "value": "1"}))
            .collect();
        json!({"spec": {"securityContext": {"sysctls": sysctls}, "containers": []}})
    };
    let versions: [(u64, Check); 5] = [
        (0, sysctls_1_0),
        (27, sysctls_1_27),
        (29, sysctls_1_29),
        (32, sysctls_1_32),
        (37, sysctls_1_37),
    ];
    for (_, check) in versions {
        assert_eq!(
            run(check, spec(&["a", "kernel.shm_rmid_forced", "b"])),
            refused("forbidden sysctls", "a, b")
        );
    }
    for (name, since) in [
        ("net.ipv4.ip_local_reserved_ports", 27),
        ("net.ipv4.tcp_keepalive_time", 29),
        ("net.ipv4.tcp_fin_timeout", 29),
        ("net.ipv4.tcp_keepalive_intvl", 29),
        ("net.ipv4.tcp_keepalive_probes", 29),
        ("net.ipv4.tcp_rmem", 32),
        ("net.ipv4.tcp_wmem", 32),
        ("net.ipv4.tcp_slow_start_after_idle", 37),
        ("net.ipv4.tcp_notsent_lowat", 37),
    ] {
        for (version, check) in versions {
            let got = run(check, spec(&[name]));
            if version >= since {
                assert_eq!(got, None, "{name} at 1.{version}");
            } else {
                assert_eq!(
                    got,
                    refused("forbidden sysctls", name),
                    "{name} at 1.{version}"
                );
            }
        }
    }
}

#[test]
fn windows_host_process() {
    let on = json!({"windowsOptions": {"hostProcess": true}});
    assert_eq!(
        run(
            host_process,
            json!({"spec": {"securityContext": on, "containers": [
                {"name": "a"},
                c("b", json!({})),
                c("c", json!({"windowsOptions": {}})),
                c("d", json!({"windowsOptions": {"hostProcess": false}})),
                c("e", on.clone()),
                c("f", on.clone()),
            ]}})
        ),
        refused(
            "hostProcess",
            r#"pod and containers "e", "f" must not set securityContext.windowsOptions.hostProcess=true"#
        )
    );
}

#[test]
fn ephemeral_containers_are_checked() {
    assert_eq!(
        run(
            privileged,
            json!({"spec": {"containers": [], "ephemeralContainers": [c("debug", json!({"privileged": true}))]}})
        ),
        refused(
            "privileged",
            r#"container "debug" must not set securityContext.privileged=true"#
        )
    );
}

#[test]
fn restricted_reasons_are_aggregated_in_upstreams_order() {
    let p = pod(json!({"spec": {"containers": [{"name": "c", "image": "nginx"}]}}));
    let lv = LevelVersion {
        level: Level::Restricted,
        version: Version::Latest,
    };
    let verdict = Evaluator::new(Some(32)).evaluate(lv, &p.metadata, p.spec.as_ref().unwrap());
    assert_eq!(
        verdict.details(),
        concat!(
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), "#,
            r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), "#,
            r#"runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), "#,
            r#"seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        )
    );
    assert_eq!(
        verdict.reasons(),
        "allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"
    );
}
