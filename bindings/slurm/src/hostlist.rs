//! Hostlist expressions (`n[1-4]`, `n[01-10,12]`, `a1,b[2-3]`) to host names.
//!
//! [`expand`] is what callers want: libslurm when this build has it, the pure-Rust
//! [`expand_hostlist_fallback`] otherwise. Both keep Slurm's order and duplicates.
//!
//! The fallback follows libslurm 22.05 (checked against `scontrol show hostnames`,
//! and by `tests/cluster.rs` against libslurm itself):
//! * elements are separated by `,` or whitespace outside brackets; empty ones vanish;
//! * a bracket holds ranges `lo` or `lo-hi` separated by `,`; numbers are zero-padded
//!   to the width of `lo` (`n[08-10]` → `n08 n09 n10`, `n[8-10]` → `n8 n9 n10`);
//! * an element may hold several bracket groups (`rack[1-2]-node[1-2]`), but nothing
//!   may follow its last one (`n[1-2]-ib` is an error, as in libslurm);
//! * with several groups, the last varies fastest, then the first, second, … (this
//!   is libslurm's order: `a[1-2]b[3-4]c[5-6]` gives `a1b3c5 a1b3c6 a2b3c5 …`);
//! * a range holds at most 65,536 hosts (libslurm's limit), an expression at most
//!   [`MAX_HOSTS`].
//!
//! It is stricter than libslurm on malformed input, where libslurm guesses
//! (`n[1-]` → `n1`, `n[ 1-2]` → `n01 n02`, `n[1-2` → `n]`) or, with a bad range in
//! the third-from-last or an earlier bracket group of an element (`n[3-1]a[1]b[1]`),
//! silently drops the element: those are errors here.

use crate::error::SlurmError;

/// libslurm's `MAX_RANGE`: a larger range is rejected.
const MAX_RANGE_HOSTS: u64 = 64 * 1024;

/// The most hosts one expression may expand to (a bound on memory for input from the
/// environment or a peer; far above any real allocation).
pub const MAX_HOSTS: usize = 1 << 20;

/// Expands a hostlist expression with libslurm, or with the pure-Rust parser when this
/// build has no libslurm.
pub fn expand(expression: &str) -> Result<Vec<String>, SlurmError> {
    match expand_hostlist(expression) {
        Err(SlurmError::Unavailable) => expand_hostlist_fallback(expression),
        result => result,
    }
}

/// Expands a hostlist expression with libslurm (`slurm_hostlist_create` / `_shift`).
///
/// Needs no Slurm configuration. Errors: [`SlurmError::Unavailable`] without libslurm,
/// [`SlurmError::HostlistRejected`] if libslurm rejects the expression.
pub fn expand_hostlist(expression: &str) -> Result<Vec<String>, SlurmError> {
    #[cfg(saker_slurm)]
    {
        crate::libslurm::expand_hostlist(expression)
    }
    #[cfg(not(saker_slurm))]
    {
        let _ = expression;
        Err(SlurmError::Unavailable)
    }
}

/// Expands a hostlist expression without libslurm (see the module doc for the rules).
pub fn expand_hostlist_fallback(expression: &str) -> Result<Vec<String>, SlurmError> {
    expand_pure(expression).map_err(|source| SlurmError::InvalidHostlist {
        expression: expression.to_owned(),
        source,
    })
}

/// Why the pure-Rust parser rejected an expression. Positions are byte offsets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostlistSyntaxError {
    #[error("`[` at byte {position} is never closed")]
    UnclosedBracket { position: usize },
    #[error("`]` at byte {position} closes nothing")]
    UnopenedBracket { position: usize },
    #[error("`[` at byte {position} is inside another bracket")]
    NestedBracket { position: usize },
    #[error("{text:?} follows the last bracket group of {element:?}")]
    TextAfterBrackets { element: String, text: String },
    #[error("invalid range {range:?} (expected lo or lo-hi, decimal)")]
    InvalidRange { range: String },
    #[error("range {range:?} counts down")]
    DescendingRange { range: String },
    #[error("range {range:?} holds more than {MAX_RANGE_HOSTS} hosts")]
    RangeTooLarge { range: String },
    #[error("the expression expands to more than {MAX_HOSTS} hosts")]
    TooManyHosts,
}

#[derive(Debug, Clone, Copy)]
struct Range {
    low: u64,
    high: u64,
    /// Digits of `low` as written: the zero-padding width of every number.
    width: usize,
}

#[derive(Debug, Clone)]
enum Part {
    Literal(String),
    Group(Vec<Range>),
}

pub(crate) fn expand_pure(expression: &str) -> Result<Vec<String>, HostlistSyntaxError> {
    let mut hosts = Vec::new();
    for (offset, element) in split_elements(expression)? {
        let parts = parse_element(element, offset)?;
        match parts.split_last() {
            Some((Part::Group(last), prefix)) => expand_prefix(prefix, last, &mut hosts)?,
            Some((Part::Literal(name), [])) => push_host(&mut hosts, name.clone())?,
            Some((Part::Literal(text), _)) => {
                return Err(HostlistSyntaxError::TextAfterBrackets {
                    element: element.to_owned(),
                    text: text.clone(),
                });
            }
            None => {}
        }
    }
    Ok(hosts)
}

fn is_separator(byte: u8) -> bool {
    byte == b',' || byte.is_ascii_whitespace()
}

/// Splits at separators outside brackets; returns each non-empty element with its
/// byte offset, and checks that brackets pair up without nesting.
fn split_elements(expression: &str) -> Result<Vec<(usize, &str)>, HostlistSyntaxError> {
    let bytes = expression.as_bytes();
    let mut elements = Vec::new();
    let mut start = 0;
    let mut open: Option<usize> = None;
    for (position, &byte) in bytes.iter().enumerate() {
        match (byte, open) {
            (b'[', Some(_)) => return Err(HostlistSyntaxError::NestedBracket { position }),
            (b'[', None) => open = Some(position),
            (b']', None) => return Err(HostlistSyntaxError::UnopenedBracket { position }),
            (b']', Some(_)) => open = None,
            (byte, None) if is_separator(byte) => {
                if position > start {
                    elements.push((start, &expression[start..position]));
                }
                start = position + 1;
            }
            _ => {}
        }
    }
    if let Some(position) = open {
        return Err(HostlistSyntaxError::UnclosedBracket { position });
    }
    if bytes.len() > start {
        elements.push((start, &expression[start..]));
    }
    Ok(elements)
}

/// Literal text and bracket groups, in order; brackets are known to pair up.
fn parse_element(element: &str, offset: usize) -> Result<Vec<Part>, HostlistSyntaxError> {
    let mut parts = Vec::new();
    let mut rest = element;
    let mut position = offset;
    while !rest.is_empty() {
        match rest.find('[') {
            Some(0) => {
                let close = rest
                    .find(']')
                    .ok_or(HostlistSyntaxError::UnclosedBracket { position })?;
                parts.push(Part::Group(parse_ranges(&rest[1..close])?));
                rest = &rest[close + 1..];
                position += close + 1;
            }
            Some(open) => {
                parts.push(Part::Literal(rest[..open].to_owned()));
                rest = &rest[open..];
                position += open;
            }
            None => {
                parts.push(Part::Literal(rest.to_owned()));
                rest = "";
            }
        }
    }
    Ok(parts)
}

fn parse_ranges(inside: &str) -> Result<Vec<Range>, HostlistSyntaxError> {
    inside.split(',').map(parse_range).collect()
}

fn parse_range(text: &str) -> Result<Range, HostlistSyntaxError> {
    let invalid = || HostlistSyntaxError::InvalidRange {
        range: text.to_owned(),
    };
    let (low_text, high_text) = text.split_once('-').unwrap_or((text, text));
    let number = |digits: &str| {
        if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(invalid());
        }
        digits.parse::<u64>().map_err(|_| invalid())
    };
    let (low, high) = (number(low_text)?, number(high_text)?);
    if low > high {
        return Err(HostlistSyntaxError::DescendingRange {
            range: text.to_owned(),
        });
    }
    if high - low >= MAX_RANGE_HOSTS {
        return Err(HostlistSyntaxError::RangeTooLarge {
            range: text.to_owned(),
        });
    }
    Ok(Range {
        low,
        high,
        width: low_text.len(),
    })
}

/// libslurm's `_push_range_list`: the rightmost group of the prefix is the outer loop;
/// each of its values is substituted and the rest of the prefix expanded again; the
/// element's last group is the innermost loop.
fn expand_prefix(
    prefix: &[Part],
    last: &[Range],
    hosts: &mut Vec<String>,
) -> Result<(), HostlistSyntaxError> {
    let Some(index) = prefix
        .iter()
        .rposition(|part| matches!(part, Part::Group(_)))
    else {
        let head = literal_text(prefix);
        for range in last {
            for value in range.low..=range.high {
                push_host(hosts, format!("{head}{value:0width$}", width = range.width))?;
            }
        }
        return Ok(());
    };
    let Part::Group(ranges) = &prefix[index] else {
        unreachable!("rposition found a group at this index");
    };
    let tail = literal_text(&prefix[index + 1..]);
    let mut substituted = prefix[..index].to_vec();
    for range in ranges {
        for value in range.low..=range.high {
            substituted.push(Part::Literal(format!(
                "{value:0width$}{tail}",
                width = range.width
            )));
            expand_prefix(&substituted, last, hosts)?;
            substituted.pop();
        }
    }
    Ok(())
}

/// The concatenated literals of parts known to hold no group.
fn literal_text(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|part| match part {
            Part::Literal(text) => text.as_str(),
            Part::Group(_) => "",
        })
        .collect()
}

fn push_host(hosts: &mut Vec<String>, host: String) -> Result<(), HostlistSyntaxError> {
    if hosts.len() >= MAX_HOSTS {
        return Err(HostlistSyntaxError::TooManyHosts);
    }
    hosts.push(host);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(expression: &str) -> Vec<String> {
        match expand_pure(expression) {
            Ok(hosts) => hosts,
            Err(error) => panic!("{expression:?} should expand: {error}"),
        }
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    /// Expected values are `scontrol show hostnames` output (Slurm 22.05.8).
    #[test]
    fn expands_like_scontrol() {
        let cases = [
            ("n[1-4]", "n1 n2 n3 n4"),
            ("n[01-10,12]", "n01 n02 n03 n04 n05 n06 n07 n08 n09 n10 n12"),
            ("a1,b[2-3]", "a1 b2 b3"),
            (
                "rack[1-2]-node[1-2]",
                "rack1-node1 rack1-node2 rack2-node1 rack2-node2",
            ),
            ("n[8-10]", "n8 n9 n10"),
            ("n[09-11]", "n09 n10 n11"),
            ("n[1-010]", "n1 n2 n3 n4 n5 n6 n7 n8 n9 n10"),
            ("n[05,7]", "n05 n7"),
            ("n1[0-2]", "n10 n11 n12"),
            ("n3,n1,n3", "n3 n1 n3"),
            ("n[1-2],n[1-2]", "n1 n2 n1 n2"),
            ("x", "x"),
            ("", ""),
            (",a,,b,", "a b"),
            ("n[1-3] m[5,7]", "n1 n2 n3 m5 m7"),
            ("n[1-2]\tn3", "n1 n2 n3"),
            ("[1-3]", "1 2 3"),
            ("n[5]", "n5"),
            ("n[007]", "n007"),
            ("n[98-101]", "n98 n99 n100 n101"),
            ("n[1-2]x[3]", "n1x3 n2x3"),
            ("n[1-2].foo[3]", "n1.foo3 n2.foo3"),
            ("n[1-2][3-4]", "n13 n14 n23 n24"),
            ("n[1-2]x[3-4]y[5]", "n1x3y5 n2x3y5 n1x4y5 n2x4y5"),
            (
                "n[1-2][3-4][5-6]",
                "n135 n136 n235 n236 n145 n146 n245 n246",
            ),
            ("n[99999999999-100000000000]", "n99999999999 n100000000000"),
        ];
        for (expression, expected) in cases {
            assert_eq!(hosts(expression), words(expected), "{expression:?}");
        }
    }

    #[test]
    fn range_size_limit_is_libslurms() {
        assert_eq!(hosts("n[1-65536]").len(), 65_536);
        assert_eq!(
            hosts("n[0-65535]").last().map(String::as_str),
            Some("n65535")
        );
        assert!(matches!(
            expand_pure("n[1-65537]"),
            Err(HostlistSyntaxError::RangeTooLarge { .. })
        ));
        assert!(matches!(
            expand_pure("n[1-100000000]"),
            Err(HostlistSyntaxError::RangeTooLarge { .. })
        ));
    }

    #[test]
    fn total_size_is_bounded() {
        // 65,536 × 65,536 hosts would need ~30 GB; the bound stops it early.
        assert_eq!(
            expand_pure("n[0-65535]x[0-65535]"),
            Err(HostlistSyntaxError::TooManyHosts)
        );
    }

    #[test]
    fn rejects_what_libslurm_rejects() {
        use HostlistSyntaxError as E;
        type Expected = fn(&E) -> bool;
        let cases: [(&str, Expected); 12] = [
            ("n[3-1]", |e| matches!(e, E::DescendingRange { .. })),
            ("n[10-8]", |e| matches!(e, E::DescendingRange { .. })),
            ("n[]", |e| matches!(e, E::InvalidRange { .. })),
            ("n[a-b]", |e| matches!(e, E::InvalidRange { .. })),
            ("n[-1]", |e| matches!(e, E::InvalidRange { .. })),
            ("n[1-2,]", |e| matches!(e, E::InvalidRange { .. })),
            ("n[,1]", |e| matches!(e, E::InvalidRange { .. })),
            ("n[1-2-3]", |e| matches!(e, E::InvalidRange { .. })),
            ("n[1-2]-ib", |e| matches!(e, E::TextAfterBrackets { .. })),
            ("a[1-2]b[3-4]c", |e| {
                matches!(e, E::TextAfterBrackets { .. })
            }),
            ("n[1-2]1", |e| matches!(e, E::TextAfterBrackets { .. })),
            ("n[1-3]]", |e| {
                matches!(e, E::UnopenedBracket { position: 6 })
            }),
        ];
        for (expression, expected) in cases {
            match expand_pure(expression) {
                Err(error) => assert!(expected(&error), "{expression:?}: {error:?}"),
                Ok(hosts) => panic!("{expression:?} should fail, gave {hosts:?}"),
            }
        }
    }

    #[test]
    fn rejects_where_libslurm_guesses() {
        assert_eq!(
            expand_pure("n[1-2"),
            Err(HostlistSyntaxError::UnclosedBracket { position: 1 })
        );
        assert_eq!(
            expand_pure("n[[1-2]"),
            Err(HostlistSyntaxError::NestedBracket { position: 2 })
        );
        assert!(matches!(
            expand_pure("n[1-]"),
            Err(HostlistSyntaxError::InvalidRange { .. })
        ));
        assert!(matches!(
            expand_pure("n[ 1-2]"),
            Err(HostlistSyntaxError::InvalidRange { .. })
        ));
    }

    #[test]
    fn public_fallback_names_the_expression() {
        let error = expand_hostlist_fallback("a,n[2-1]").unwrap_err();
        assert!(
            matches!(&error, SlurmError::InvalidHostlist { expression, source: HostlistSyntaxError::DescendingRange { range } }
                if expression == "a,n[2-1]" && range == "2-1"),
            "{error:?}"
        );
    }

    #[test]
    fn expand_works_with_or_without_libslurm() {
        assert_eq!(
            expand("n[1-3],login").expect("valid expression"),
            words("n1 n2 n3 login")
        );
        if !crate::available() {
            assert!(matches!(
                expand_hostlist("n1"),
                Err(SlurmError::Unavailable)
            ));
        }
    }
}
