//! Checking a Function's source before any pod runs it: the runtime's own `--check` mode
//! parses the module with Python's `ast` on the control plane's host and looks for the
//! handler, executing none of the user's code, so a syntax error or a missing handler is
//! reported on the Function with Python's message and line. Results are remembered by
//! content: a resync does not start Python again.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Mutex;

use tokio::io::AsyncWriteExt;

use super::RUNTIME;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The source is wrong: Python's message.
    #[error("{0}")]
    Invalid(String),
    /// Python could not be run at all.
    #[error("checking the source: {0}")]
    Check(String),
}

/// What was checked: source, handler and name.
type Checked = (String, String, String);

/// Remembered verdicts.
#[derive(Debug, Default)]
pub struct Validator {
    seen: Mutex<HashMap<Checked, Result<(), String>>>,
}

#[derive(serde::Deserialize)]
struct Verdict {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

impl Validator {
    pub async fn check(&self, source: &str, handler: &str, name: &str) -> Result<(), Error> {
        let key = (source.to_string(), handler.to_string(), name.to_string());
        if let Some(v) = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return v.clone().map_err(Error::Invalid);
        }
        let verdict = run_check(source, handler, name).await?;
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, verdict.clone());
        verdict.map_err(Error::Invalid)
    }
}

async fn run_check(source: &str, handler: &str, name: &str) -> Result<Result<(), String>, Error> {
    let input = serde_json::json!({"source": source, "handler": handler, "name": name});
    let mut child = tokio::process::Command::new("python3")
        .args(["-I", "-c", RUNTIME, "--check"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::Check(format!("starting python3: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.to_string().as_bytes())
            .await
            .map_err(|e| Error::Check(e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| Error::Check(e.to_string()))?;
    let verdict: Verdict = serde_json::from_slice(&out.stdout).map_err(|_| {
        Error::Check(format!(
            "python3 said: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    })?;
    Ok(if verdict.ok {
        Ok(())
    } else {
        Err(verdict.error.unwrap_or_else(|| "invalid source".into()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn python_errors_with_their_line() {
        let v = Validator::default();
        v.check("def handle(body):\n    return body\n", "handle", "hello")
            .await
            .unwrap();
        let err = v
            .check("def handle(body):\n    return body +\n", "handle", "hello")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("SyntaxError") && err.contains("line 2"),
            "{err}"
        );
        let err = v
            .check("def other(body):\n    return body\n", "handle", "hello")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("handler 'handle' not found"), "{err}");
    }
}
