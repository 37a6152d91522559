//! Just enough PEM and DER to tell a CertificateSigningRequest's request and certificate
//! from garbage, with upstream's messages: the API checks their shape, never their
//! cryptography (signers do that), so no X.509 library is pulled into the API crate.

use base64::Engine;

/// Why `spec.request` is not a PEM-encoded PKCS#10 request; upstream's `ParseCSR`. The DER is
/// checked for the request's outer shape, not parsed, and its signature is not verified.
pub(super) fn csr_problem(pem: &[u8]) -> Option<String> {
    match pem_decode(pem) {
        Some((block, _)) if block.label == "CERTIFICATE REQUEST" => {
            der_shape(&block.der, &[0x30, 0x30, 0x03])
                .err()
                .map(str::to_string)
        }
        _ => Some("PEM block type must be CERTIFICATE REQUEST".to_string()),
    }
}

/// Why `status.certificate` is not a chain of PEM CERTIFICATE blocks; upstream's
/// validateCertificate. Empty is fine: nothing has been issued.
pub(super) fn certificate_problem(mut pem: &[u8]) -> Option<String> {
    if pem.is_empty() {
        return None;
    }
    let mut blocks = 0;
    while let Some((block, rest)) = pem_decode(pem) {
        if block.label != "CERTIFICATE" {
            return Some(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                block.label
            ));
        }
        if block.headers {
            return Some("no PEM block headers are permitted".into());
        }
        blocks += 1;
        if block.der.is_empty() {
            return Some("found CERTIFICATE PEM block containing 0 certificates".into());
        }
        let mut der = block.der.as_slice();
        while !der.is_empty() {
            match der_element(der) {
                Some((0x30, _, rest)) => der = rest,
                _ => return Some("x509: malformed certificate".into()),
            }
        }
        pem = rest;
    }
    (blocks == 0).then(|| "must contain at least one CERTIFICATE PEM block".to_string())
}

struct PemBlock {
    label: String,
    headers: bool,
    der: Vec<u8>,
}

/// Go's `pem.Decode`: the first well-formed block (skipping anything before it and any
/// malformed block), and what follows it.
fn pem_decode(data: &[u8]) -> Option<(PemBlock, &[u8])> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    let mut rest = data;
    loop {
        let at = find(rest, BEGIN).filter(|&i| i == 0 || rest[i - 1] == b'\n')?;
        let after = &rest[at + BEGIN.len()..];
        rest = after;
        let (line, body) = split_line(after);
        let Some(label) = line.strip_suffix(b"-----") else {
            continue;
        };
        let Ok(label) = std::str::from_utf8(label) else {
            continue;
        };
        let end_marker = format!("-----END {label}-----");
        let Some(end) = find(body, end_marker.as_bytes()) else {
            continue;
        };
        let inner = std::str::from_utf8(&body[..end]).unwrap_or("");
        let mut lines = inner.lines().map(str::trim_end).peekable();
        let mut headers = false;
        while let Some(l) = lines.peek() {
            if l.contains(':') {
                headers = true;
                lines.next();
            } else {
                if headers && l.is_empty() {
                    lines.next();
                }
                break;
            }
        }
        let b64: String = lines
            .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
            .collect();
        let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64) else {
            continue;
        };
        let (_, tail) = split_line(&body[end + end_marker.len()..]);
        return Some((
            PemBlock {
                label: label.to_string(),
                headers,
                der,
            },
            tail,
        ));
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn split_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&c| c == b'\n') {
        Some(i) => {
            let line = &data[..i];
            (line.strip_suffix(b"\r").unwrap_or(line), &data[i + 1..])
        }
        None => (data, &[]),
    }
}

/// One DER element: its tag, contents and what follows.
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// Checks that `der` is one SEQUENCE holding elements with these tags, and nothing after it.
fn der_shape(der: &[u8], tags: &[u8]) -> Result<(), &'static str> {
    let (tag, mut inner, rest) = der_element(der).ok_or("asn1: syntax error: data truncated")?;
    if tag != 0x30 {
        return Err("asn1: structure error: tags don't match");
    }
    if !rest.is_empty() {
        return Err("asn1: syntax error: trailing data");
    }
    for &want in tags {
        let (tag, _, next) = der_element(inner).ok_or("asn1: syntax error: data truncated")?;
        if tag != want {
            return Err("asn1: structure error: tags don't match");
        }
        inner = next;
    }
    Ok(())
}
