//! Upstream's `test/fixtures_*.go`: for each check, pods built from the minimal pod a level
//! allows that still pass, and pods that fail naming the check, at the levels and versions
//! where the check is in force.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::admission::pod_security::api::{Level, LevelVersion, Version};
use crate::admission::pod_security::evaluator::Evaluator;

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).expect("pod")
}

/// The minimal pod each level allows at `latest` (upstream's `GetMinimalValidPod`).
fn minimal(level: Level) -> Value {
    let mut p = json!({"spec": {
        "initContainers": [{"name": "initcontainer1", "image": "registry.k8s.io/pause"}],
        "containers": [{"name": "container1", "image": "registry.k8s.io/pause"}],
    }});
    if level == Level::Restricted {
        p["spec"]["securityContext"] =
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
        for list in ["initContainers", "containers"] {
            p["spec"][list][0]["securityContext"] = json!({
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]},
            });
        }
    }
    p
}

type Tweak = fn(&mut Value);

/// One check's pods from upstream's fixtures: they pass, or fail naming `substring`.
struct Fixture {
    level: Level,
    since: u64,
    substring: &'static str,
    pass: &'static [Tweak],
    fail: &'static [Tweak],
}

fn sc<'a>(p: &'a mut Value, list: &str) -> &'a mut Value {
    &mut p["spec"][list][0]["securityContext"]
}

static FIXTURES: &[Fixture] = &[
    Fixture {
        level: Level::Restricted,
        since: 8,
        substring: "allowPrivilegeEscalation != false",
        pass: &[],
        fail: &[
            |p| sc(p, "containers")["allowPrivilegeEscalation"] = json!(true),
            |p| sc(p, "initContainers")["allowPrivilegeEscalation"] = json!(true),
            |p| sc(p, "containers")["allowPrivilegeEscalation"] = Value::Null,
            |p| *sc(p, "containers") = Value::Null,
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "forbidden AppArmor profile",
        pass: &[|p| {
            p["metadata"]["annotations"] = json!({
                "container.apparmor.security.beta.kubernetes.io/container1": "runtime/default",
                "container.apparmor.security.beta.kubernetes.io/initcontainer1": "localhost/foo",
            })
        }],
        fail: &[
            |p| {
                p["metadata"]["annotations"] = json!({"container.apparmor.security.beta.kubernetes.io/container1": "unconfined"})
            },
            |p| sc(p, "initContainers")["appArmorProfile"] = json!({"type": "Unconfined"}),
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "capabilities",
        pass: &[|p| {
            let all = json!([
                "AUDIT_WRITE",
                "CHOWN",
                "DAC_OVERRIDE",
                "FOWNER",
                "FSETID",
                "KILL",
                "MKNOD",
                "NET_BIND_SERVICE",
                "SETFCAP",
                "SETGID",
                "SETPCAP",
                "SETUID",
                "SYS_CHROOT"
            ]);
            sc(p, "containers")["capabilities"]["add"] = all.clone();
            sc(p, "initContainers")["capabilities"]["add"] = all;
        }],
        fail: &[
            |p| sc(p, "containers")["capabilities"]["add"] = json!(["NET_RAW"]),
            |p| sc(p, "initContainers")["capabilities"]["add"] = json!(["NET_RAW"]),
            |p| sc(p, "containers")["capabilities"]["add"] = json!(["chown"]),
            |p| sc(p, "containers")["capabilities"]["add"] = json!(["CAP_CHOWN"]),
        ],
    },
    Fixture {
        level: Level::Restricted,
        since: 22,
        substring: "unrestricted capabilities",
        pass: &[|p| {
            sc(p, "containers")["capabilities"]["add"] = json!(["NET_BIND_SERVICE"]);
            sc(p, "initContainers")["capabilities"]["add"] = json!(["NET_BIND_SERVICE"]);
        }],
        fail: &[
            |p| sc(p, "containers")["capabilities"]["drop"] = json!([]),
            |p| sc(p, "initContainers")["capabilities"]["drop"] = json!([]),
            |p| {
                sc(p, "containers")["capabilities"]["drop"] =
                    json!(["SYS_TIME", "NET_RAW", "CHOWN"])
            },
            |p| sc(p, "containers")["capabilities"]["add"] = json!(["CHOWN"]),
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "host namespaces",
        pass: &[],
        fail: &[
            |p| p["spec"]["hostIPC"] = json!(true),
            |p| p["spec"]["hostNetwork"] = json!(true),
            |p| p["spec"]["hostPID"] = json!(true),
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "hostPath",
        pass: &[],
        fail: &[|p| {
            p["spec"]["volumes"] = json!([
                {"name": "volume-emptydir", "emptyDir": {}},
                {"name": "volume-hostpath", "hostPath": {"path": "/a"}},
            ])
        }],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "hostPort",
        pass: &[|p| p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 12345}])],
        fail: &[
            |p| {
                p["spec"]["containers"][0]["ports"] =
                    json!([{"containerPort": 12345, "hostPort": 12345}])
            },
            |p| {
                p["spec"]["initContainers"][0]["ports"] =
                    json!([{"containerPort": 12346, "hostPort": 12346}])
            },
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 34,
        substring: "probe or lifecycle host",
        pass: &[|p| {
            p["spec"]["containers"][0]["livenessProbe"] = json!({"httpGet": {"port": 8080}})
        }],
        fail: &[
            |p| {
                p["spec"]["containers"][0]["livenessProbe"] =
                    json!({"httpGet": {"host": "bad.host", "port": 8080}})
            },
            |p| {
                p["spec"]["initContainers"][0]["readinessProbe"] =
                    json!({"tcpSocket": {"host": "8.8.8.8", "port": 8080}})
            },
            |p| {
                p["spec"]["containers"][0]["lifecycle"] =
                    json!({"postStart": {"httpGet": {"host": "bad.host", "port": 8080}}})
            },
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "privileged",
        pass: &[|p| sc(p, "containers")["privileged"] = json!(false)],
        fail: &[
            |p| sc(p, "containers")["privileged"] = json!(true),
            |p| sc(p, "initContainers")["privileged"] = json!(true),
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "procMount",
        pass: &[|p| sc(p, "containers")["procMount"] = json!("Default")],
        fail: &[
            |p| sc(p, "containers")["procMount"] = json!("Unmasked"),
            |p| sc(p, "initContainers")["procMount"] = json!("Unmasked"),
        ],
    },
    Fixture {
        level: Level::Restricted,
        since: 0,
        substring: "restricted volume types",
        pass: &[|p| {
            p["spec"]["volumes"] = json!([
                {"name": "volume1", "emptyDir": {}},
                {"name": "volume2", "secret": {"secretName": "test"}},
                {"name": "volume3", "persistentVolumeClaim": {"claimName": "test"}},
                {"name": "volume4", "downwardAPI": {}},
                {"name": "volume5", "configMap": {"name": "test"}},
                {"name": "volume6", "projected": {"sources": []}},
            ])
        }],
        fail: &[
            |p| p["spec"]["volumes"] = json!([{"name": "v", "gcePersistentDisk": {"pdName": "t"}}]),
            |p| p["spec"]["volumes"] = json!([{"name": "v", "nfs": {"server": "t", "path": "/"}}]),
            |p| p["spec"]["volumes"] = json!([{"name": "v", "hostPath": {"path": "/dev/null"}}]),
        ],
    },
    Fixture {
        level: Level::Restricted,
        since: 0,
        substring: "runAsNonRoot != true",
        pass: &[|p| {
            p["spec"]["securityContext"]["runAsNonRoot"] = Value::Null;
            sc(p, "containers")["runAsNonRoot"] = json!(true);
            sc(p, "initContainers")["runAsNonRoot"] = json!(true);
        }],
        fail: &[
            |p| p["spec"]["securityContext"]["runAsNonRoot"] = Value::Null,
            |p| p["spec"]["securityContext"]["runAsNonRoot"] = json!(false),
            |p| sc(p, "containers")["runAsNonRoot"] = json!(false),
            |p| sc(p, "initContainers")["runAsNonRoot"] = json!(false),
        ],
    },
    Fixture {
        level: Level::Restricted,
        since: 23,
        substring: "runAsUser=0",
        pass: &[|p| {
            p["spec"]["securityContext"]["runAsUser"] = json!(1000);
            sc(p, "containers")["runAsUser"] = json!(1000);
        }],
        fail: &[
            |p| p["spec"]["securityContext"]["runAsUser"] = json!(0),
            |p| sc(p, "containers")["runAsUser"] = json!(0),
            |p| sc(p, "initContainers")["runAsUser"] = json!(0),
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "seLinuxOptions",
        pass: &[|p| {
            p["spec"]["securityContext"]["seLinuxOptions"] = json!({"type": "container_t"});
            sc(p, "containers")["seLinuxOptions"] =
                json!({"type": "container_init_t", "level": "somevalue"});
            sc(p, "initContainers")["seLinuxOptions"] = json!({"type": "container_kvm_t"});
        }],
        fail: &[
            |p| p["spec"]["securityContext"]["seLinuxOptions"] = json!({"type": "somevalue"}),
            |p| sc(p, "containers")["seLinuxOptions"] = json!({"type": "somevalue"}),
            |p| p["spec"]["securityContext"]["seLinuxOptions"] = json!({"user": "somevalue"}),
            |p| p["spec"]["securityContext"]["seLinuxOptions"] = json!({"role": "somevalue"}),
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 19,
        substring: "seccompProfile",
        pass: &[|p| {
            p["spec"]["securityContext"]["seccompProfile"] = json!({"type": "RuntimeDefault"})
        }],
        fail: &[
            |p| p["spec"]["securityContext"]["seccompProfile"] = json!({"type": "Unconfined"}),
            |p| sc(p, "containers")["seccompProfile"] = json!({"type": "Unconfined"}),
            |p| sc(p, "initContainers")["seccompProfile"] = json!({"type": "Unconfined"}),
        ],
    },
    Fixture {
        level: Level::Restricted,
        since: 19,
        substring: "seccompProfile",
        pass: &[|p| {
            p["spec"]["securityContext"]["seccompProfile"] = Value::Null;
            sc(p, "containers")["seccompProfile"] = json!({"type": "RuntimeDefault"});
            sc(p, "initContainers")["seccompProfile"] =
                json!({"type": "Localhost", "localhostProfile": "p"});
        }],
        fail: &[
            |p| p["spec"]["securityContext"]["seccompProfile"] = Value::Null,
            |p| sc(p, "containers")["seccompProfile"] = json!({"type": "Unconfined"}),
        ],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "forbidden sysctls",
        pass: &[|p| {
            p["spec"]["securityContext"]["sysctls"] = json!([
                {"name": "kernel.shm_rmid_forced", "value": "0"},
                {"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"},
                {"name": "net.ipv4.tcp_syncookies", "value": "0"},
                {"name": "net.ipv4.ping_group_range", "value": "1 0"},
                {"name": "net.ipv4.ip_unprivileged_port_start", "value": "1024"},
            ])
        }],
        fail: &[|p| {
            p["spec"]["securityContext"]["sysctls"] =
                json!([{"name": "othersysctl", "value": "other"}])
        }],
    },
    Fixture {
        level: Level::Baseline,
        since: 0,
        substring: "hostProcess",
        pass: &[],
        fail: &[
            |p| p["spec"]["securityContext"]["windowsOptions"] = json!({"hostProcess": true}),
            |p| sc(p, "containers")["windowsOptions"] = json!({"hostProcess": true}),
        ],
    },
];

#[test]
fn upstream_fixtures_pass_and_fail_at_their_levels() {
    for (evaluator, max) in [(Evaluator::new(Some(32)), 32), (Evaluator::new(None), 37)] {
        for (i, f) in FIXTURES.iter().enumerate() {
            if f.since > max {
                continue;
            }
            let levels: &[Level] = match f.level {
                Level::Baseline => &[Level::Baseline, Level::Restricted],
                _ => &[Level::Restricted],
            };
            for &level in levels {
                let lv = LevelVersion {
                    level,
                    version: Version::Latest,
                };
                let verdict = |v: Value| {
                    let p = pod(v);
                    evaluator.evaluate(lv, &p.metadata, p.spec.as_ref().unwrap())
                };
                let base = minimal(level);
                assert!(verdict(base.clone()).allowed(), "minimal {level} pod");
                // Passing pods are built for their own level (upstream's generators skip
                // the stricter one, whose own checks they would trip).
                let pass = if level == f.level { f.pass } else { &[] };
                for tweak in pass {
                    let mut p = base.clone();
                    tweak(&mut p);
                    let v = verdict(p.clone());
                    assert!(
                        v.allowed(),
                        "fixture {i} at {lv} 1.{max}: {p} refused: {v:?}"
                    );
                }
                for tweak in f.fail {
                    let mut p = base.clone();
                    tweak(&mut p);
                    let v = verdict(p.clone());
                    assert!(
                        v.details().contains(f.substring),
                        "fixture {i} at {lv} 1.{max}: {p} gave {:?}",
                        v.details()
                    );
                    // Privileged allows everything.
                    let p = pod(p);
                    let privileged = LevelVersion {
                        level: Level::Privileged,
                        version: Version::Latest,
                    };
                    let spec = p.spec.as_ref().unwrap();
                    assert!(evaluator.evaluate(privileged, &p.metadata, spec).allowed());
                    // A check is not in force before the version that introduced it.
                    if f.since > 0 && level == Level::Baseline {
                        let older = LevelVersion {
                            level,
                            version: Version::Minor(f.since - 1),
                        };
                        let v = evaluator.evaluate(older, &p.metadata, spec);
                        assert!(!v.details().contains(f.substring), "fixture {i} at {older}");
                    }
                }
            }
        }
    }
}
