//! Byte sizes as people write them (`10G`, `512MiB`, `1048576`), parsed and printed in one
//! place: iSCSI LUN sizes, `cluster.heal-bandwidth`.
//!
//! A number with an optional K, M, G, T or P suffix, in powers of 1024 (as targetcli and
//! Gluster's options mean them), any case, optionally followed by `B` or `iB`. Printed
//! exactly, with the largest suffix that divides it (`1536M`, not `1.5G`), so what is
//! printed parses back to the same value.

use std::fmt;
use std::str::FromStr;

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(pub u64);

/// Why a size was refused; its `Display` names the text given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size '{text}': {why}")]
pub struct SizeError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

const UNITS: [(u32, char); 5] = [(50, 'P'), (40, 'T'), (30, 'G'), (20, 'M'), (10, 'K')];

impl Size {
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for Size {
    type Err = SizeError;
    fn from_str(text: &str) -> Result<Size, SizeError> {
        let bad = |why| SizeError { text: text.to_string(), why };
        let t = text.trim();
        let lower = t.to_ascii_lowercase();
        let t = if lower.ends_with("ib") {
            &t[..t.len() - 2]
        } else if lower.ends_with('b') {
            &t[..t.len() - 1]
        } else {
            t
        };
        let (num, shift) = match t.chars().last() {
            None => return Err(bad("empty, expected a number of bytes (e.g. 10G)")),
            Some(c) if c.is_ascii_digit() => (t, 0),
            Some(c) => match UNITS.iter().find(|(_, u)| u.eq_ignore_ascii_case(&c)) {
                Some((shift, _)) => (t[..t.len() - 1].trim_end(), *shift),
                None => {
                    return Err(bad("expected a number with an optional K, M, G, T or P suffix"))
                }
            },
        };
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(
                "expected a number with an optional K, M, G, T or P suffix (e.g. 10G)",
            ));
        }
        let n: u64 = num.parse().map_err(|_| bad("too large"))?;
        n.checked_mul(1u64 << shift).map(Size).ok_or_else(|| bad("too large"))
    }
}

/// Exact: `10G`, `1536M`, `1048577`.
impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shift, unit) in UNITS {
            if self.0 >= 1 << shift && self.0.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Result<u64, SizeError> {
        s.parse::<Size>().map(Size::bytes)
    }

    #[test]
    fn accepted_forms() {
        assert_eq!(p("10G").unwrap(), 10 << 30);
        assert_eq!(p("512MiB").unwrap(), 512 << 20);
        assert_eq!(p("512mib").unwrap(), 512 << 20);
        assert_eq!(p("1t").unwrap(), 1 << 40);
        assert_eq!(p("1048576").unwrap(), 1 << 20);
        assert_eq!(p(" 10 M ").unwrap(), 10 << 20);
        assert_eq!(p("100kb").unwrap(), 100 << 10);
        assert_eq!(p("7B").unwrap(), 7);
        assert_eq!(p("0").unwrap(), 0);
        assert_eq!(Size(1536 << 20).to_string(), "1536M");
        assert_eq!(Size(10 << 30).to_string(), "10G");
        assert_eq!(Size(1025).to_string(), "1025");
    }

    #[test]
    fn refused_with_the_text_and_why() {
        for (bad, why) in [
            ("", "empty"),
            ("B", "empty"),
            ("G", "expected a number"),
            ("10X", "optional K, M, G, T or P suffix"),
            ("-1G", "expected a number"),
            ("1.5G", "expected a number"),
            ("+5", "expected a number"),
            ("16385P", "too large"),
            ("99999999999999999999", "too large"),
        ] {
            let e = p(bad).unwrap_err();
            assert_eq!(e.text, bad);
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("invalid size '{bad}': ")), "{msg}");
            assert!(msg.contains(why), "{bad:?}: {msg}");
        }
    }

    proptest! {
        #[test]
        fn display_parses_back(n in any::<u64>()) {
            prop_assert_eq!(Size(n).to_string().parse::<Size>(), Ok(Size(n)));
        }

        #[test]
        fn any_text_parses_or_names_itself(s in "[0-9a-zA-Z .+-]{0,10}") {
            match s.parse::<Size>() {
                Ok(v) => prop_assert_eq!(v.to_string().parse::<Size>(), Ok(v)),
                Err(e) => {
                    let quoted = format!("'{s}'");
                    prop_assert!(e.to_string().contains(&quoted));
                }
            }
        }
    }
}
