//! Which checks a level and version run, as upstream's `policy.checkRegistry`: a check
//! applies from the first version it names, in the revision of the newest version at or
//! below the one asked for; `restricted` runs the baseline checks too, except those one of
//! its own checks replaces (its stricter capabilities, seccomp, volume and /proc checks).
//! Baseline checks come first, then restricted ones, each group by ID, so that messages list
//! reasons in upstream's order. `latest` and versions past the newest this server knows are
//! evaluated as the server's own version, as kube-apiserver evaluates them at its emulated
//! version.

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::api::{Level, LevelVersion, Version};
use super::checks::{self, Forbidden, Outcome};

type CheckFn = fn(&ObjectMeta, &PodSpec) -> Outcome;

/// One revision of a check, from `since` (a 1.x minor) on.
struct Revision {
    since: u64,
    check: CheckFn,
    /// Baseline checks this one replaces while it applies (restricted checks only).
    overrides: &'static [&'static str],
}

struct Check {
    id: &'static str,
    level: Level,
    revisions: &'static [Revision],
}

const fn rev(since: u64, check: CheckFn) -> Revision {
    Revision {
        since,
        check,
        overrides: &[],
    }
}

const fn replacing(since: u64, check: CheckFn, overrides: &'static [&'static str]) -> Revision {
    Revision {
        since,
        check,
        overrides,
    }
}

/// Every check, baseline then restricted, each group sorted by ID (byte order, as Go sorts).
static CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        revisions: &[rev(0, checks::app_armor)],
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        revisions: &[rev(0, checks::capabilities_baseline)],
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        revisions: &[rev(0, checks::host_namespaces)],
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        revisions: &[rev(0, checks::host_path_volumes)],
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        revisions: &[rev(0, checks::host_ports)],
    },
    Check {
        id: "hostProbesAndHostLifecycle",
        level: Level::Baseline,
        revisions: &[rev(34, checks::host_probes_and_lifecycle)],
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        revisions: &[rev(0, checks::privileged)],
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        revisions: &[
            rev(0, checks::proc_mount_1_0),
            rev(35, checks::proc_mount_1_35),
        ],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        revisions: &[rev(0, checks::se_linux_1_0), rev(31, checks::se_linux_1_31)],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        revisions: &[
            rev(0, checks::seccomp_baseline_1_0),
            rev(19, checks::seccomp_baseline_1_19),
        ],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        revisions: &[
            rev(0, checks::sysctls_1_0),
            rev(27, checks::sysctls_1_27),
            rev(29, checks::sysctls_1_29),
            rev(32, checks::sysctls_1_32),
            rev(37, checks::sysctls_1_37),
        ],
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        revisions: &[rev(0, checks::host_process)],
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        revisions: &[
            rev(8, checks::allow_privilege_escalation_1_8),
            rev(25, checks::allow_privilege_escalation_1_25),
        ],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        revisions: &[
            replacing(
                22,
                checks::capabilities_restricted_1_22,
                &["capabilities_baseline"],
            ),
            replacing(
                25,
                checks::capabilities_restricted,
                &["capabilities_baseline"],
            ),
        ],
    },
    Check {
        id: "procMount_restricted",
        level: Level::Restricted,
        revisions: &[replacing(35, checks::proc_mount_1_0, &["procMount"])],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        revisions: &[replacing(
            0,
            checks::restricted_volumes,
            &["hostPathVolumes"],
        )],
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        revisions: &[
            rev(0, checks::run_as_non_root_1_0),
            rev(35, checks::run_as_non_root_1_35),
        ],
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        revisions: &[
            rev(23, checks::run_as_user_1_23),
            rev(35, checks::run_as_user_1_35),
        ],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        revisions: &[
            replacing(
                19,
                checks::seccomp_restricted_1_19,
                &["seccompProfile_baseline"],
            ),
            replacing(
                25,
                checks::seccomp_restricted_1_25,
                &["seccompProfile_baseline"],
            ),
        ],
    },
];

/// The newest policy version any check names.
fn newest() -> u64 {
    CHECKS
        .iter()
        .filter_map(|c| c.revisions.last().map(|r| r.since))
        .max()
        .unwrap_or_default()
}

/// Runs the checks of a level and version.
#[derive(Clone, Copy, Debug)]
pub struct Evaluator {
    /// The version `latest` means.
    max: u64,
}

impl Evaluator {
    /// Evaluates `latest` as `emulated` (the server's own minor version) when that is older
    /// than the newest check.
    pub fn new(emulated: Option<u64>) -> Self {
        let newest = newest();
        Evaluator {
            max: emulated.map_or(newest, |e| e.min(newest)),
        }
    }

    /// The checks `lv` runs, in the order their reasons are reported.
    fn checks(&self, lv: LevelVersion) -> Vec<CheckFn> {
        if lv.level == Level::Privileged {
            return Vec::new();
        }
        let v = match lv.version {
            Version::Minor(m) if m < self.max => m,
            _ => self.max,
        };
        let revision = |c: &'static Check| c.revisions.iter().rev().find(|r| r.since <= v);
        let applicable = |level: Level| {
            CHECKS
                .iter()
                .filter(move |c| c.level == level)
                .filter_map(move |c| revision(c).map(|r| (c.id, r)))
        };
        if lv.level == Level::Baseline {
            return applicable(Level::Baseline).map(|(_, r)| r.check).collect();
        }
        let restricted: Vec<_> = applicable(Level::Restricted).collect();
        let overridden = |id: &str| restricted.iter().any(|(_, r)| r.overrides.contains(&id));
        applicable(Level::Baseline)
            .filter(|(id, _)| !overridden(id))
            .chain(restricted.iter().copied())
            .map(|(_, r)| r.check)
            .collect()
    }

    /// Every refusal of the pod at `lv`, in order.
    pub fn evaluate(&self, lv: LevelVersion, meta: &ObjectMeta, spec: &PodSpec) -> Verdict {
        Verdict(
            self.checks(lv)
                .into_iter()
                .filter_map(|check| check(meta, spec))
                .collect(),
        )
    }
}

/// The refusals of all the checks of a level (upstream's `AggregateCheckResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict(pub Vec<Forbidden>);

impl Verdict {
    pub fn allowed(&self) -> bool {
        self.0.is_empty()
    }

    /// `host ports, privileged`: the reasons alone, for summaries of many pods.
    pub fn reasons(&self) -> String {
        self.0
            .iter()
            .map(|f| f.reason.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `hostPort (container "a" uses hostPort 80), privileged (...)`.
    pub fn details(&self) -> String {
        self.0
            .iter()
            .map(|f| match f.detail.as_str() {
                "" => f.reason.clone(),
                d => format!("{} ({d})", f.reason),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_sorted_baseline_first() {
        let ids = |level| -> Vec<&str> {
            CHECKS
                .iter()
                .filter(|c| c.level == level)
                .map(|c| c.id)
                .collect()
        };
        for level in [Level::Baseline, Level::Restricted] {
            let mut sorted = ids(level);
            sorted.sort();
            assert_eq!(ids(level), sorted);
        }
        let first_restricted = CHECKS
            .iter()
            .position(|c| c.level == Level::Restricted)
            .unwrap();
        assert!(
            CHECKS[first_restricted..]
                .iter()
                .all(|c| c.level == Level::Restricted)
        );
        for c in CHECKS {
            assert!(
                c.revisions.windows(2).all(|w| w[0].since < w[1].since),
                "{}",
                c.id
            );
        }
    }

    #[test]
    fn latest_is_the_emulated_version() {
        assert_eq!(newest(), 37);
        assert_eq!(Evaluator::new(Some(32)).max, 32);
        assert_eq!(Evaluator::new(Some(40)).max, 37);
        let lv = |level, version| LevelVersion { level, version };
        let e = Evaluator::new(Some(32));
        // 12 baseline checks exist; hostProbesAndHostLifecycle starts at 1.34.
        assert_eq!(e.checks(lv(Level::Baseline, Version::Latest)).len(), 11);
        assert_eq!(e.checks(lv(Level::Baseline, Version::Minor(99))).len(), 11);
        assert_eq!(
            Evaluator::new(None)
                .checks(lv(Level::Baseline, Version::Latest))
                .len(),
            12
        );
        // Restricted at 1.32: 11 baseline less 3 replaced, plus 6 of its own.
        assert_eq!(e.checks(lv(Level::Restricted, Version::Latest)).len(), 14);
        // At 1.0: restrictedVolumes (replacing hostPathVolumes) and runAsNonRoot only.
        assert_eq!(e.checks(lv(Level::Restricted, Version::Minor(0))).len(), 12);
        assert!(e.checks(lv(Level::Privileged, Version::Latest)).is_empty());
    }
}
