//! The suite's command line, without a cluster. (This test also makes `cargo test` build the
//! `conformance` binary itself, which `hack/test.sh` then runs against a fresh cluster.)

use std::process::Command;

fn conformance() -> Command {
    Command::new(env!("CARGO_BIN_EXE_conformance"))
}

#[test]
fn list_names_every_suite_and_honours_the_filter() {
    let out = conformance()
        .args(["--list", "--kubectl", "/nonexistent/kubectl.1.32"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let names = String::from_utf8(out.stdout).unwrap();
    for case in ["python/", "kube-rs/crd-delete", "kubectl-1.32/"] {
        assert!(names.contains(case), "{case} missing from:\n{names}");
    }

    let out = conformance()
        .args([
            "--list",
            "--filter",
            "crd-delete",
            "--kubectl",
            "/x/kubectl.1.32",
        ])
        .output()
        .unwrap();
    let names = String::from_utf8(out.stdout).unwrap();
    assert_eq!(names.trim(), "kube-rs/crd-delete");
}

#[test]
fn a_run_without_a_kubeconfig_says_which_flag_is_missing() {
    let out = conformance().env_remove("KUBECONFIG").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--kubeconfig"), "{err}");
}
