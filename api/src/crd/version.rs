//! Kubernetes' version priority (`version.CompareKubeAwareVersionStrings`): how discovery
//! orders the versions of a group, preferred first.

use std::cmp::Ordering;

/// `v<major>`, `v<major>beta<minor>`, `v<major>alpha<minor>`; anything else is `Other`.
#[derive(Debug, PartialEq, Eq)]
enum Parsed<'a> {
    Ga(u64),
    Beta(u64, u64),
    Alpha(u64, u64),
    Other(&'a str),
}

fn parse(v: &str) -> Parsed<'_> {
    let Some(rest) = v.strip_prefix('v') else {
        return Parsed::Other(v);
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return Parsed::Other(v);
    }
    let Ok(major) = rest[..digits].parse::<u64>() else {
        return Parsed::Other(v);
    };
    let tail = &rest[digits..];
    if tail.is_empty() {
        return Parsed::Ga(major);
    }
    for (word, alpha) in [("beta", false), ("alpha", true)] {
        if let Some(minor) = tail.strip_prefix(word)
            && !minor.is_empty()
            && !minor.starts_with('0')
            && minor.bytes().all(|b| b.is_ascii_digit())
            && let Ok(minor) = minor.parse::<u64>()
        {
            return if alpha {
                Parsed::Alpha(major, minor)
            } else {
                Parsed::Beta(major, minor)
            };
        }
    }
    Parsed::Other(v)
}

/// Orders versions by priority, highest first: GA before beta before alpha before the rest,
/// higher numbers first, the rest alphabetically.
pub fn compare_priority(a: &str, b: &str) -> Ordering {
    fn rank(p: &Parsed<'_>) -> u8 {
        match p {
            Parsed::Ga(_) => 0,
            Parsed::Beta(..) => 1,
            Parsed::Alpha(..) => 2,
            Parsed::Other(_) => 3,
        }
    }
    let (pa, pb) = (parse(a), parse(b));
    rank(&pa).cmp(&rank(&pb)).then_with(|| match (&pa, &pb) {
        (Parsed::Ga(x), Parsed::Ga(y)) => y.cmp(x),
        (Parsed::Beta(x1, x2), Parsed::Beta(y1, y2))
        | (Parsed::Alpha(x1, x2), Parsed::Alpha(y1, y2)) => y1.cmp(x1).then(y2.cmp(x2)),
        (Parsed::Other(x), Parsed::Other(y)) => x.cmp(y),
        _ => Ordering::Equal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_aware_order() {
        let mut v = vec![
            "v1alpha1",
            "foo",
            "v2",
            "v1",
            "v10",
            "v11beta2",
            "v10beta3",
            "v3beta1",
            "v12alpha1",
            "v11alpha2",
            "foo10",
            "v1beta1",
        ];
        v.sort_by(|a, b| compare_priority(a, b));
        assert_eq!(
            v,
            vec![
                "v10",
                "v2",
                "v1",
                "v11beta2",
                "v10beta3",
                "v3beta1",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "v1alpha1",
                "foo",
                "foo10",
            ]
        );
    }
}
