//! The CNI plugin containerd runs for every pod sandbox (see the `minik8s-cni` crate): a
//! program of its own, so that each of its runs maps only what it uses.

use std::io::Read;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut stdin = Vec::new();
    let result = std::io::stdin()
        .read_to_end(&mut stdin)
        .map_err(|source| minik8s_cni::Error::Io {
            what: "reading stdin".into(),
            source,
        })
        .and_then(|_| minik8s_cni::Invocation::from_env(|k| std::env::var(k).ok()))
        .and_then(|inv| minik8s_cni::run(&inv, &stdin));
    match result {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            // The spec: the error as JSON on stdout, a non-zero exit.
            print!("{}", e.to_json());
            ExitCode::FAILURE
        }
    }
}
