//! Container logs as the CRI writes them (`<RFC3339Nano> <stdout|stderr> <P|F> <text>` lines)
//! read back as upstream's kubelet does: from the last `tailLines` lines, only lines written
//! since a time, with or without their timestamps, cut after `limitBytes`, and followed while
//! the container runs.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use jiff::Timestamp;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

/// What a log request asks for (upstream's PodLogOptions, as the kubelet receives them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    /// Only the last this many lines.
    pub tail_lines: Option<u64>,
    /// Only lines written at or after this time.
    pub since: Option<Timestamp>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<u64>,
}

fn flag(v: &str) -> Result<bool, String> {
    match v {
        "" | "true" | "1" | "True" | "TRUE" | "t" | "T" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" => Ok(false),
        _ => Err(format!("invalid boolean value {v:?}")),
    }
}

impl LogOptions {
    /// Reads the query of a `/containerLogs` request; `now` anchors `sinceSeconds`.
    pub fn from_query(query: &[(String, String)], now: Timestamp) -> Result<LogOptions, String> {
        let mut o = LogOptions::default();
        let mut since_seconds = None;
        let mut since_time = None;
        for (k, v) in query {
            match k.as_str() {
                "follow" => o.follow = flag(v)?,
                "previous" => o.previous = flag(v)?,
                "timestamps" => o.timestamps = flag(v)?,
                "tailLines" => {
                    let n: i64 = v.parse().map_err(|_| format!("invalid tailLines {v:?}"))?;
                    if n < 0 {
                        return Err("tailLines: must be greater than or equal to 0".into());
                    }
                    o.tail_lines = Some(n as u64);
                }
                "limitBytes" => {
                    let n: i64 = v.parse().map_err(|_| format!("invalid limitBytes {v:?}"))?;
                    if n < 1 {
                        return Err("limitBytes: must be greater than 0".into());
                    }
                    o.limit_bytes = Some(n as u64);
                }
                "sinceSeconds" => {
                    let n: i64 = v
                        .parse()
                        .map_err(|_| format!("invalid sinceSeconds {v:?}"))?;
                    if n < 1 {
                        return Err("sinceSeconds: must be greater than 0".into());
                    }
                    since_seconds = Some(n);
                }
                "sinceTime" => {
                    since_time = Some(
                        v.parse::<Timestamp>()
                            .map_err(|e| format!("invalid sinceTime {v:?}: {e}"))?,
                    );
                }
                _ => {}
            }
        }
        o.since = match (since_seconds, since_time) {
            (Some(_), Some(_)) => {
                return Err("at most one of `sinceTime` or `sinceSeconds` may be specified".into());
            }
            (Some(s), None) => Some(now - jiff::SignedDuration::from_secs(s)),
            (None, t) => t,
        };
        Ok(o)
    }
}

/// One parsed line of a CRI log file.
#[derive(Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// The timestamp as written (RFC 3339 with nanoseconds).
    pub timestamp: &'a str,
    pub stream: &'a str,
    /// A fragment of a longer line; the line goes on in the next record.
    pub partial: bool,
    pub content: &'a [u8],
}

/// Parses one record (without its newline). Records not in the CRI format are `None`.
pub fn parse_line(line: &[u8]) -> Option<LogLine<'_>> {
    let mut rest = line;
    let mut field = || -> Option<&[u8]> {
        let at = rest.iter().position(|b| *b == b' ');
        let (head, tail) = match at {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = tail;
        Some(head)
    };
    let timestamp = std::str::from_utf8(field()?).ok()?;
    let stream = std::str::from_utf8(field()?).ok()?;
    if timestamp.is_empty() || !matches!(stream, "stdout" | "stderr") {
        return None;
    }
    let tags = field()?;
    // Tags are `:`-separated; the first says whether the line is complete.
    let partial = tags.split(|b| *b == b':').next() == Some(b"P");
    Some(LogLine {
        timestamp,
        stream,
        partial,
        content: rest,
    })
}

/// Turns CRI log records into what `kubectl logs` prints, keeping track of partial lines,
/// the `since` filter and the byte limit across calls.
#[derive(Debug)]
pub struct Formatter {
    opts: LogOptions,
    /// The previous record written was a fragment: the next one continues its line.
    continues: bool,
    written: u64,
    /// An incomplete record at the end of what was fed so far.
    pending: Vec<u8>,
}

impl Formatter {
    pub fn new(opts: LogOptions) -> Self {
        Formatter {
            opts,
            continues: false,
            written: 0,
            pending: Vec::new(),
        }
    }

    /// Whether the byte limit has been reached: nothing more will be written.
    pub fn done(&self) -> bool {
        self.opts.limit_bytes.is_some_and(|l| self.written >= l)
    }

    fn emit(&mut self, out: &mut Vec<u8>, data: &[u8]) {
        let take = match self.opts.limit_bytes {
            Some(limit) => (limit.saturating_sub(self.written) as usize).min(data.len()),
            None => data.len(),
        };
        out.extend_from_slice(&data[..take]);
        self.written += take as u64;
    }

    fn record(&mut self, line: &[u8], out: &mut Vec<u8>) {
        if self.done() {
            return;
        }
        let Some(rec) = parse_line(line) else {
            tracing::debug!("skipping a log line not in the CRI format");
            return;
        };
        if let Some(since) = self.opts.since {
            match rec.timestamp.parse::<Timestamp>() {
                Ok(t) if t < since => return,
                Ok(_) => {}
                Err(_) => return,
            }
        }
        let mut buf = Vec::with_capacity(rec.content.len() + rec.timestamp.len() + 2);
        if self.opts.timestamps && !self.continues {
            buf.extend_from_slice(rec.timestamp.as_bytes());
            buf.push(b' ');
        }
        buf.extend_from_slice(rec.content);
        if !rec.partial {
            buf.push(b'\n');
        }
        self.continues = rec.partial;
        self.emit(out, &buf);
    }

    /// Feeds bytes read from the file; complete records are formatted into `out`.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let mut start = 0;
        for (i, b) in data.iter().enumerate() {
            if *b == b'\n' {
                if self.pending.is_empty() {
                    self.record(&data[start..i], out);
                } else {
                    let mut line = std::mem::take(&mut self.pending);
                    line.extend_from_slice(&data[start..i]);
                    self.record(&line, out);
                }
                start = i + 1;
            }
        }
        self.pending.extend_from_slice(&data[start..]);
    }

    /// The end of the log: a last record without its newline is written too.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.record(&line, out);
        }
    }
}

/// Where the last `n` lines of `f` start (upstream's FindTailLineStartIndex: the file's lines
/// end with a newline).
pub fn tail_start<F: Read + Seek>(f: &mut F, n: u64) -> std::io::Result<u64> {
    const BLOCK: u64 = 64 * 1024;
    let size = f.seek(SeekFrom::End(0))?;
    let mut left = size;
    let mut count = 0u64;
    let mut buf = Vec::new();
    let mut right = size;
    while right > 0 && count <= n {
        left = right.saturating_sub(BLOCK);
        buf.resize((right - left) as usize, 0);
        f.seek(SeekFrom::Start(left))?;
        f.read_exact(&mut buf)?;
        count += buf.iter().filter(|b| **b == b'\n').count() as u64;
        right = left;
    }
    let mut at = 0usize;
    while count > n {
        let idx = buf[at..]
            .iter()
            .position(|b| *b == b'\n')
            .map(|i| i + 1)
            .unwrap_or(buf.len() - at);
        at += idx;
        count -= 1;
    }
    Ok(left + at as u64)
}

/// Formats a whole log held in memory (tests, and small reads).
pub fn format_all(data: &[u8], opts: &LogOptions) -> Vec<u8> {
    let start = match opts.tail_lines {
        Some(n) => tail_start(&mut std::io::Cursor::new(data), n).unwrap_or(0) as usize,
        None => 0,
    };
    let mut f = Formatter::new(opts.clone());
    let mut out = Vec::new();
    f.feed(&data[start..], &mut out);
    f.finish(&mut out);
    out
}

/// Streams the log at `path` into `tx` as `opts` asks. With `follow`, keeps reading what the
/// container writes until `running` says it stopped (and what it wrote last has been sent) or
/// the receiver goes away.
pub async fn stream<R, Fut>(
    path: PathBuf,
    opts: LogOptions,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut running: R,
) where
    R: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = match opts.tail_lines {
        Some(n) => {
            let p = path.clone();
            tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
                tail_start(&mut std::fs::File::open(p)?, n)
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        }
        None => Ok(0),
    };
    let file = async {
        let mut f = tokio::fs::File::open(&path).await?;
        f.seek(SeekFrom::Start(start?)).await?;
        Ok::<_, std::io::Error>(f)
    };
    let mut file = match file.await {
        Ok(f) => Some(f),
        // A container that never wrote has no file yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    let follow = opts.follow;
    let mut fmt = Formatter::new(opts);
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_check = tokio::time::Instant::now();
    let mut stopped = false;
    loop {
        let n = match file.as_mut() {
            Some(f) => match f.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            },
            None => 0,
        };
        if n > 0 {
            let mut out = Vec::new();
            fmt.feed(&buf[..n], &mut out);
            if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                return;
            }
            if fmt.done() {
                return;
            }
            continue;
        }
        // At the end of what is written so far.
        if !follow || stopped {
            let mut out = Vec::new();
            fmt.finish(&mut out);
            if !out.is_empty() {
                let _ = tx.send(Ok(Bytes::from(out))).await;
            }
            return;
        }
        if file.is_none() {
            file = tokio::fs::File::open(&path).await.ok();
        }
        if last_check.elapsed() >= Duration::from_millis(500) {
            last_check = tokio::time::Instant::now();
            // One more read after the container stopped picks up its last words.
            stopped = !running().await;
            if stopped {
                continue;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = tx.closed() => return,
        }
    }
}

/// The log file of a container: the CRI reports its full path.
pub fn log_file(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    (!path.is_empty() && p.is_absolute()).then(|| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
2024-05-01T10:00:00.000000001Z stdout F one
2024-05-01T10:00:01.5Z stderr F two
2024-05-01T10:00:02Z stdout P thr
2024-05-01T10:00:02.1Z stdout F ee
2024-05-01T10:00:03Z stdout F 
2024-05-01T10:00:04Z stdout F five
";

    fn opts() -> LogOptions {
        LogOptions::default()
    }

    fn run(o: LogOptions) -> String {
        String::from_utf8(format_all(LOG.as_bytes(), &o)).unwrap()
    }

    #[test]
    fn parses_records() {
        let l = parse_line(b"2024-05-01T10:00:00Z stdout F hello world").unwrap();
        assert_eq!(l.timestamp, "2024-05-01T10:00:00Z");
        assert_eq!(l.stream, "stdout");
        assert!(!l.partial);
        assert_eq!(l.content, b"hello world");
        let l = parse_line(b"2024-05-01T10:00:00Z stderr P:x part").unwrap();
        assert!(l.partial);
        assert_eq!(l.content, b"part");
        let l = parse_line(b"2024-05-01T10:00:00Z stdout F").unwrap();
        assert_eq!(l.content, b"");
        assert!(parse_line(b"garbage").is_none());
        assert!(parse_line(b"2024 other F x").is_none());
    }

    #[test]
    fn joins_partial_lines() {
        assert_eq!(run(opts()), "one\ntwo\nthree\n\nfive\n");
    }

    #[test]
    fn timestamps_prefix_each_line_once() {
        let out = run(LogOptions {
            timestamps: true,
            ..opts()
        });
        assert_eq!(
            out,
            "2024-05-01T10:00:00.000000001Z one\n2024-05-01T10:00:01.5Z two\n\
             2024-05-01T10:00:02Z three\n2024-05-01T10:00:03Z \n2024-05-01T10:00:04Z five\n"
        );
    }

    #[test]
    fn tail_counts_records() {
        let tail = |n| {
            run(LogOptions {
                tail_lines: Some(n),
                ..opts()
            })
        };
        assert_eq!(tail(0), "");
        assert_eq!(tail(1), "five\n");
        assert_eq!(tail(2), "\nfive\n");
        // A partial record is a line of the file: the tail may start mid-line, as upstream.
        assert_eq!(tail(3), "ee\n\nfive\n");
        assert_eq!(tail(100), "one\ntwo\nthree\n\nfive\n");
        // Bigger than one read block.
        let mut big = String::new();
        for i in 0..20000 {
            big.push_str(&format!("2024-05-01T10:00:00Z stdout F line {i}\n"));
        }
        let out = format_all(
            big.as_bytes(),
            &LogOptions {
                tail_lines: Some(3),
                ..opts()
            },
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "line 19997\nline 19998\nline 19999\n"
        );
        let out = format_all(
            big.as_bytes(),
            &LogOptions {
                tail_lines: Some(15000),
                ..opts()
            },
        );
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 15000);
    }

    #[test]
    fn since_filters_by_time() {
        let out = run(LogOptions {
            since: Some("2024-05-01T10:00:01.5Z".parse().unwrap()),
            ..opts()
        });
        assert_eq!(out, "two\nthree\n\nfive\n");
        let out = run(LogOptions {
            since: Some("2024-05-01T10:00:03.5Z".parse().unwrap()),
            tail_lines: Some(4),
            timestamps: true,
            ..opts()
        });
        assert_eq!(out, "2024-05-01T10:00:04Z five\n");
    }

    #[test]
    fn limit_bytes_cuts_output() {
        let out = run(LogOptions {
            limit_bytes: Some(6),
            ..opts()
        });
        assert_eq!(out, "one\ntw");
    }

    #[test]
    fn feeds_in_pieces() {
        let mut f = Formatter::new(opts());
        let mut out = Vec::new();
        for chunk in LOG.as_bytes().chunks(7) {
            f.feed(chunk, &mut out);
        }
        f.finish(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "one\ntwo\nthree\n\nfive\n");
    }

    #[test]
    fn query_options() {
        let now: Timestamp = "2024-05-01T10:00:10Z".parse().unwrap();
        let q = |pairs: &[(&str, &str)]| {
            let v: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            LogOptions::from_query(&v, now)
        };
        let o = q(&[
            ("follow", "true"),
            ("tailLines", "5"),
            ("sinceSeconds", "10"),
            ("timestamps", "1"),
            ("limitBytes", "100"),
        ])
        .unwrap();
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!(o.tail_lines, Some(5));
        assert_eq!(o.limit_bytes, Some(100));
        assert_eq!(o.since, Some("2024-05-01T10:00:00Z".parse().unwrap()));
        let o = q(&[("sinceTime", "2024-05-01T09:00:00Z"), ("previous", "true")]).unwrap();
        assert!(o.previous);
        assert_eq!(o.since, Some("2024-05-01T09:00:00Z".parse().unwrap()));
        assert!(q(&[("sinceTime", "2024-05-01T09:00:00Z"), ("sinceSeconds", "1")]).is_err());
        assert!(q(&[("tailLines", "-1")]).is_err());
        assert!(q(&[("limitBytes", "0")]).is_err());
        assert!(q(&[("sinceSeconds", "0")]).is_err());
        assert!(q(&[("follow", "maybe")]).is_err());
    }

    #[tokio::test]
    async fn follows_until_the_container_stops() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "2024-05-01T10:00:00Z stdout F first\n").unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = running.clone();
        let task = tokio::spawn(stream(
            path.clone(),
            LogOptions {
                follow: true,
                ..opts()
            },
            tx,
            move || {
                let r = flag.load(std::sync::atomic::Ordering::SeqCst);
                async move { r }
            },
        ));
        assert_eq!(rx.recv().await.unwrap().unwrap(), "first\n");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"2024-05-01T10:00:01Z stdout P sec").unwrap();
        f.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        f.write_all(b"\n2024-05-01T10:00:01Z stdout F ond\n")
            .unwrap();
        let mut got = Vec::new();
        while got != b"second\n" {
            got.extend_from_slice(&rx.recv().await.unwrap().unwrap());
        }
        f.write_all(b"2024-05-01T10:00:02Z stderr F last words\n")
            .unwrap();
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        let mut rest = Vec::new();
        while let Some(chunk) = rx.recv().await {
            rest.extend_from_slice(&chunk.unwrap());
        }
        assert_eq!(rest, b"last words\n");
        task.await.unwrap();
    }
}
