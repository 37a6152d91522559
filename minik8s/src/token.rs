//! `minik8s token`: bootstrap tokens as `kubeadm token` manages them, so a machine can join
//! the cluster (`minik8s node --token ... --certificate-authority ...`) with a short-lived
//! secret instead of a copy of the server's PKI. A token is a Secret in kube-system of type
//! `bootstrap.kubernetes.io/token` with kubeadm's fields; the API server authenticates it as
//! `system:bootstrap:<id>` (`--enable-bootstrap-token-auth`) and the token cleaner deletes it
//! once it expires.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use minik8s_api::bootstrap_token::{self as token, BootstrapToken};

use crate::control::ClientArgs;

/// kubeadm's default group for the tokens it makes, which its bindings name.
const DEFAULT_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Create a bootstrap token on the server and print it.
    Create(CreateArgs),
    /// List the bootstrap tokens on the server.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete bootstrap tokens on the server, by token id or whole token.
    Delete {
        #[command(flatten)]
        client: ClientArgs,
        /// `[a-z0-9]{6}` token ids or `[a-z0-9]{6}.[a-z0-9]{16}` tokens.
        tokens: Vec<String>,
    },
    /// Generate and print a bootstrap token, but do not create it on the server.
    Generate,
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The token to create, `[a-z0-9]{6}.[a-z0-9]{16}` [default: a random one].
    token: Option<String>,
    /// How long the token is valid before it is deleted; `0` for never.
    #[arg(long, default_value = "24h0m0s", value_parser = parse_ttl)]
    ttl: Duration,
    /// A human-friendly description of what the token is for.
    #[arg(long, default_value = "")]
    description: String,
    /// Extra groups the token authenticates in (each `system:bootstrappers:...`).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_GROUP)]
    groups: Vec<String>,
    /// What the token may be used for: `authentication`, `signing`.
    #[arg(long, value_delimiter = ',', default_value = "signing,authentication")]
    usages: Vec<String>,
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    minik8s_controllers::util::duration::parse_go(s)
        .ok_or_else(|| format!("invalid duration {s:?}"))
}

pub async fn run(command: TokenCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        TokenCommand::Generate => writeln!(out, "{}", token::generate())?,
        TokenCommand::Create(args) => {
            let client = args.client.client().await?;
            let created = create(client, &args, Timestamp::now()).await?;
            writeln!(out, "{created}")?;
        }
        TokenCommand::List { client } => {
            let client = client.client().await?;
            list(client, &mut out, Timestamp::now()).await?;
        }
        TokenCommand::Delete { client, tokens } => {
            let ids = ids_to_delete(&tokens)?;
            let client = client.client().await?;
            delete(client, &ids, &mut out).await?;
        }
    }
    Ok(())
}

/// The token `args` describe at `now`, validated as kubeadm validates it.
fn token_of(args: &CreateArgs, now: Timestamp) -> anyhow::Result<BootstrapToken> {
    let text = args.token.clone().unwrap_or_else(token::generate);
    let Some((id, secret)) = token::parse(&text) else {
        anyhow::bail!(
            "the bootstrap token {text:?} was not of the form {:?}",
            token::TOKEN_PATTERN
        );
    };
    token::validate_usages(&args.usages).map_err(anyhow::Error::msg)?;
    let groups: Vec<String> = args
        .groups
        .iter()
        .filter(|g| !g.is_empty())
        .cloned()
        .collect();
    if !groups.is_empty() && !args.usages.iter().any(|u| u == "authentication") {
        anyhow::bail!(
            "token groups cannot be specified unless --usages includes \"authentication\""
        );
    }
    for g in &groups {
        token::validate_group(g).map_err(anyhow::Error::msg)?;
    }
    let expires = if args.ttl.is_zero() {
        None
    } else {
        let ttl = SignedDuration::try_from(args.ttl).context("--ttl is too long")?;
        Some(now.checked_add(ttl).context("--ttl is too long")?)
    };
    Ok(BootstrapToken {
        id: id.to_string(),
        secret: secret.to_string(),
        description: args.description.clone(),
        expires,
        usages: args.usages.clone(),
        groups,
    })
}

/// Creates the token's Secret and returns the token; a token with the id already there is
/// an error, as kubeadm's.
async fn create(client: kube::Client, args: &CreateArgs, now: Timestamp) -> anyhow::Result<String> {
    let t = token_of(args, now)?;
    let secrets: Api<Secret> = Api::namespaced(client, token::NAMESPACE);
    match secrets.create(&PostParams::default(), &t.to_secret()).await {
        Ok(_) => Ok(t.token()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            anyhow::bail!("a token with id {:?} already exists", t.id)
        }
        Err(e) => Err(e).context("failed to create bootstrap token"),
    }
}

/// Upstream's `duration.ShortHumanDuration`.
fn short_human_duration(d: SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 60 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 24 {
        return format!("{hours}h");
    }
    if hours < 24 * 365 {
        return format!("{}d", hours / 24);
    }
    format!("{}y", hours / 24 / 365)
}

/// kubeadm's `humanReadableBootstrapToken`: the cells of one listing row.
fn row(t: &BootstrapToken, now: Timestamp) -> Vec<String> {
    let or_none = |s: String| if s.is_empty() { "<none>".into() } else { s };
    let (ttl, expires) = match t.expires {
        Some(at) => (short_human_duration(at.duration_since(now)), at.to_string()),
        None => ("<forever>".into(), "<never>".into()),
    };
    vec![
        t.token(),
        ttl,
        expires,
        or_none(t.usages.join(",")),
        or_none(t.description.clone()),
        or_none(t.groups.join(",")),
    ]
}

/// Lines aligned as Go's `tabwriter.NewWriter(out, 10, 4, 3, ' ', 0)` aligns kubeadm's: each
/// cell but the last padded to its column's widest plus 3, at least 10.
fn tabulate(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns.saturating_sub(1))
        .map(|i| {
            let widest = rows
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0);
            (widest + 3).max(10)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        for (i, cell) in r.iter().enumerate() {
            match widths.get(i) {
                Some(&w) if i + 1 < r.len() => {
                    out.push_str(&format!("{cell:<w$}"));
                }
                _ => out.push_str(cell),
            }
        }
        out.push('\n');
    }
    out
}

async fn list(client: kube::Client, out: &mut impl Write, now: Timestamp) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client, token::NAMESPACE);
    let listed = secrets
        .list(&ListParams::default().fields(&format!("type={}", token::SECRET_TYPE)))
        .await
        .context("failed to list bootstrap tokens")?;
    let mut rows = vec![
        [
            "TOKEN",
            "TTL",
            "EXPIRES",
            "USAGES",
            "DESCRIPTION",
            "EXTRA GROUPS",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for s in &listed.items {
        match BootstrapToken::from_secret(s) {
            Ok(t) => rows.push(row(&t, now)),
            Err(e) => eprintln!("{e}"),
        }
    }
    out.write_all(tabulate(&rows).as_bytes())?;
    Ok(())
}

/// The token ids `args` name (kubeadm's `RunDeleteTokens` argument rules).
fn ids_to_delete(args: &[String]) -> anyhow::Result<Vec<String>> {
    if args.is_empty() {
        anyhow::bail!(
            "missing subcommand; 'token delete' is missing token of form {:?}",
            token::ID_PATTERN
        );
    }
    args.iter()
        .map(|a| {
            if token::valid_id(a) {
                return Ok(a.clone());
            }
            match token::parse(a) {
                Some((id, _)) => Ok(id.to_string()),
                None => anyhow::bail!(
                    "given token {a:?} didn't match pattern {:?} or {:?}",
                    token::ID_PATTERN,
                    token::TOKEN_PATTERN
                ),
            }
        })
        .collect()
}

async fn delete(client: kube::Client, ids: &[String], out: &mut impl Write) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client, token::NAMESPACE);
    for id in ids {
        secrets
            .delete(&token::secret_name(id), &DeleteParams::default())
            .await
            .with_context(|| format!("failed to delete bootstrap token {id:?}"))?;
        writeln!(out, "bootstrap token {id:?} deleted")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: TokenCommand,
    }

    fn create_args(args: &[&str]) -> CreateArgs {
        let argv = ["token", "create"].iter().chain(args).copied();
        match Cli::parse_from(argv).command {
            TokenCommand::Create(a) => a,
            _ => unreachable!(),
        }
    }

    fn now() -> Timestamp {
        "2025-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn create_follows_kubeadms_defaults_and_checks() {
        let t = token_of(&create_args(&[]), now()).unwrap();
        assert!(token::parse(&t.token()).is_some());
        assert_eq!(t.expires, Some("2025-01-02T00:00:00Z".parse().unwrap()));
        assert_eq!(t.usages, vec!["signing", "authentication"]);
        assert_eq!(t.groups, vec![DEFAULT_GROUP]);

        let t = token_of(
            &create_args(&[
                "abcdef.0123456789abcdef",
                "--ttl",
                "0",
                "--description",
                "for n2",
                "--groups",
                "system:bootstrappers:workers",
            ]),
            now(),
        )
        .unwrap();
        assert_eq!(t.token(), "abcdef.0123456789abcdef");
        assert_eq!(t.expires, None);
        assert_eq!(t.description, "for n2");
        assert_eq!(t.groups, vec!["system:bootstrappers:workers"]);

        let err = |args: &[&str]| token_of(&create_args(args), now()).unwrap_err().to_string();
        assert_eq!(
            err(&["abc.def"]),
            r#"the bootstrap token "abc.def" was not of the form "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z""#
        );
        assert!(
            err(&["--groups", "system:masters"])
                .starts_with("bootstrap group \"system:masters\" is invalid")
        );
        assert_eq!(
            err(&["--usages", "signing"]),
            "token groups cannot be specified unless --usages includes \"authentication\""
        );
        assert!(
            err(&["--usages", "everything"])
                .starts_with("invalid bootstrap token usage string: everything")
        );
        // Signing alone is fine without groups.
        assert!(
            token_of(
                &create_args(&["--usages", "signing", "--groups", ""]),
                now()
            )
            .is_ok()
        );
    }

    #[test]
    fn listing_looks_like_kubeadms() {
        let t = BootstrapToken {
            id: "abcdef".into(),
            secret: "0123456789abcdef".into(),
            description: String::new(),
            expires: Some("2025-01-01T23:30:00Z".parse().unwrap()),
            usages: vec!["authentication".into(), "signing".into()],
            groups: vec![DEFAULT_GROUP.into()],
        };
        let forever = BootstrapToken {
            id: "zzzzzz".into(),
            expires: None,
            groups: Vec::new(),
            description: "lab".into(),
            ..t.clone()
        };
        let header = [
            "TOKEN",
            "TTL",
            "EXPIRES",
            "USAGES",
            "DESCRIPTION",
            "EXTRA GROUPS",
        ]
        .map(String::from)
        .to_vec();
        let text = tabulate(&[header, row(&t, now()), row(&forever, now())]);
        assert_eq!(
            text,
            "TOKEN                     TTL         EXPIRES                USAGES                   DESCRIPTION   EXTRA GROUPS\n\
             abcdef.0123456789abcdef   23h         2025-01-01T23:30:00Z   authentication,signing   <none>        system:bootstrappers:kubeadm:default-node-token\n\
             zzzzzz.0123456789abcdef   <forever>   <never>                authentication,signing   lab           <none>\n"
        );
        assert_eq!(short_human_duration(SignedDuration::from_secs(59)), "59s");
        assert_eq!(short_human_duration(SignedDuration::from_secs(90)), "1m");
        assert_eq!(short_human_duration(SignedDuration::from_hours(49)), "2d");
        assert_eq!(
            short_human_duration(SignedDuration::from_hours(24 * 400)),
            "1y"
        );
        assert_eq!(
            short_human_duration(SignedDuration::from_secs(-5)),
            "<invalid>"
        );
    }

    #[test]
    fn delete_takes_ids_or_tokens() {
        assert_eq!(
            ids_to_delete(&["abcdef".into(), "zzzzzz.0123456789abcdef".into()]).unwrap(),
            vec!["abcdef", "zzzzzz"]
        );
        assert_eq!(
            ids_to_delete(&["nope".into()]).unwrap_err().to_string(),
            r#"given token "nope" didn't match pattern "\\A([a-z0-9]{6})\\z" or "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z""#
        );
        assert!(ids_to_delete(&[]).is_err());
    }

    #[tokio::test]
    async fn create_list_and_delete_against_a_server() {
        let api = testkit::InProcess::start(testkit::Backend::Sqlite)
            .await
            .unwrap();
        let client = api.client();
        let made = create(
            client.clone(),
            &create_args(&["abcdef.0123456789abcdef", "--description", "n2"]),
            Timestamp::now(),
        )
        .await
        .unwrap();
        assert_eq!(made, "abcdef.0123456789abcdef");
        let again = create(
            client.clone(),
            &create_args(&["abcdef.0123456789abcdef"]),
            Timestamp::now(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            again.to_string(),
            "a token with id \"abcdef\" already exists"
        );
        let mut listing = Vec::new();
        list(client.clone(), &mut listing, Timestamp::now())
            .await
            .unwrap();
        let listing = String::from_utf8(listing).unwrap();
        assert!(
            listing.contains("abcdef.0123456789abcdef   23h"),
            "{listing}"
        );
        let mut said = Vec::new();
        delete(client.clone(), &["abcdef".into()], &mut said)
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8(said).unwrap(),
            "bootstrap token \"abcdef\" deleted\n"
        );
        let secrets: Api<Secret> = Api::namespaced(client, token::NAMESPACE);
        assert!(
            secrets
                .get_opt("bootstrap-token-abcdef")
                .await
                .unwrap()
                .is_none()
        );
    }
}
