//! `list` is `kubectl get functions` with the columns a function's author reads (where it
//! answers, which revision serves, whether it is Ready), laid out and aged as kubectl lays
//! them out so the two outputs read alike.

use clap::Args;
use k8s_openapi::jiff::Timestamp;
use knative_lite::function::Function;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::client::ClientArgs;
use crate::deploy::ready_condition;

#[derive(Args, Debug)]
pub struct ListArgs {
    /// List the Functions of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

pub async fn run(cluster: &ClientArgs, args: ListArgs) -> anyhow::Result<()> {
    let cluster = cluster.connect().await?;
    let api: Api<Function> = if args.all_namespaces {
        Api::all(cluster.client)
    } else {
        Api::namespaced(cluster.client, &cluster.namespace)
    };
    let functions = api.list(&ListParams::default()).await?.items;
    if functions.is_empty() {
        if args.all_namespaces {
            eprintln!("No resources found");
        } else {
            eprintln!("No resources found in {} namespace.", cluster.namespace);
        }
        return Ok(());
    }
    print!(
        "{}",
        table(&functions, args.all_namespaces, Timestamp::now())
    );
    Ok(())
}

fn table(functions: &[Function], namespaces: bool, now: Timestamp) -> String {
    let mut header = vec!["NAME", "URL", "REVISION", "READY", "AGE"];
    if namespaces {
        header.insert(0, "NAMESPACE");
    }
    let mut rows = vec![header.into_iter().map(str::to_owned).collect::<Vec<_>>()];
    for f in functions {
        let status = f.status.as_ref();
        let mut row = vec![
            f.name_any(),
            status.and_then(|s| s.url.clone()).unwrap_or_default(),
            status
                .and_then(|s| s.latest_ready_revision_name.clone())
                .unwrap_or_default(),
            ready_condition(f).map_or_else(|| "Unknown".to_owned(), |c| c.status.clone()),
            f.metadata
                .creation_timestamp
                .as_ref()
                .map_or_else(|| "<unknown>".to_owned(), |t| age(now, t.0)),
        ];
        if namespaces {
            row.insert(0, f.namespace().unwrap_or_default());
        }
        rows.push(row);
    }
    columns(&rows)
}

/// Aligns cells as kubectl's tabwriter does: each column as wide as its widest cell, three
/// spaces apart, the last one unpadded.
fn columns(rows: &[Vec<String>]) -> String {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 3;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// kubectl's `HumanDuration`: the age at the precision a glance needs.
fn age(now: Timestamp, then: Timestamp) -> String {
    let seconds = now.as_second() - then.as_second();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    let seconds = seconds.max(0);
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if days < 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if years < 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        };
    }
    format!("{years}y")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use knative_lite::function::{FunctionSpec, FunctionStatus};
    use knative_lite::serving::{Condition, Status};

    fn ago(seconds: i64) -> String {
        let now = Timestamp::from_second(1_000_000_000).unwrap();
        age(
            now,
            Timestamp::from_second(1_000_000_000 - seconds).unwrap(),
        )
    }

    #[test]
    fn ages_like_kubectl() {
        assert_eq!(ago(0), "0s");
        assert_eq!(ago(-1), "0s");
        assert_eq!(ago(-5), "<invalid>");
        assert_eq!(ago(5), "5s");
        assert_eq!(ago(119), "119s");
        assert_eq!(ago(120), "2m");
        assert_eq!(ago(3 * 60 + 12), "3m12s");
        assert_eq!(ago(10 * 60 + 5), "10m");
        assert_eq!(ago(179 * 60), "179m");
        assert_eq!(ago(3 * 3600), "3h");
        assert_eq!(ago(5 * 3600 + 30 * 60), "5h30m");
        assert_eq!(ago(20 * 3600), "20h");
        assert_eq!(ago(2 * 86400), "2d");
        assert_eq!(ago(3 * 86400 + 4 * 3600), "3d4h");
        assert_eq!(ago(30 * 86400), "30d");
        assert_eq!(ago(3 * 365 * 86400), "3y");
    }

    fn function(name: &str, ns: &str, ready: Option<&str>) -> Function {
        let mut f = Function::new(name, FunctionSpec::default());
        f.metadata.namespace = Some(ns.into());
        f.metadata.creation_timestamp = Some(Time(Timestamp::from_second(999_999_995).unwrap()));
        if let Some(ready) = ready {
            f.status = Some(FunctionStatus {
                status: Status {
                    observed_generation: Some(1),
                    conditions: vec![Condition {
                        type_: "Ready".into(),
                        status: ready.into(),
                        ..Condition::default()
                    }],
                },
                url: Some(format!("http://{name}.{ns}.example.com")),
                latest_ready_revision_name: Some(format!("{name}-00001")),
                ..FunctionStatus::default()
            });
        }
        f
    }

    #[test]
    fn tables() {
        let now = Timestamp::from_second(1_000_000_000).unwrap();
        let fs = [
            function("hello", "default", Some("True")),
            function("a", "team", None),
        ];
        assert_eq!(
            table(&fs, false, now),
            "NAME    URL                                REVISION      READY     AGE\n\
             hello   http://hello.default.example.com   hello-00001   True      5s\n\
             a                                                        Unknown   5s\n"
        );
        let all = table(&fs[1..], true, now);
        assert_eq!(
            all,
            "NAMESPACE   NAME   URL   REVISION   READY     AGE\n\
             team        a                       Unknown   5s\n"
        );
    }
}
