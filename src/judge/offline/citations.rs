//! Citations in the answer (`[doc_3]`, `[2]`) and how many name a retrieved context.

use crate::judge::Citations;
use crate::trace::Trace;

/// Citations (`[doc_3]`, `[2]`): an id of a letter then up to 39 of `[A-Za-z0-9_.:-]`, or one to
/// three digits, in brackets. A number is valid when it is a context's rank (1-based) or id; a name
/// when it is a context's id.
pub(crate) fn citations(trace: &Trace) -> Citations {
    let mut c = Citations::default();
    let bytes = trace.answer.as_bytes();
    for open in memchr::memchr_iter(b'[', bytes) {
        let Some(id) = citation_id(&bytes[open + 1..]) else {
            continue;
        };
        // The id is ASCII, so this slice is on character boundaries.
        let id = &trace.answer[open + 1..open + 1 + id];
        c.total += 1;
        let by_id = || {
            trace
                .contexts
                .iter()
                .any(|ctx| ctx.id.as_deref() == Some(id))
        };
        let valid = match id.parse::<usize>() {
            Ok(n) => (1..=trace.contexts.len()).contains(&n) || by_id(),
            Err(_) => by_id(),
        };
        c.valid += u32::from(valid);
    }
    c
}

/// The length of the citation id at the start of `s` when a `]` closes it.
fn citation_id(s: &[u8]) -> Option<usize> {
    let first = *s.first()?;
    let (len, max) = if first.is_ascii_alphabetic() {
        let rest = s[1..]
            .iter()
            .take(40)
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
            .count();
        (1 + rest, 40)
    } else {
        (
            s.iter().take(4).take_while(|b| b.is_ascii_digit()).count(),
            3,
        )
    };
    (len > 0 && len <= max && s.get(len) == Some(&b']')).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::super::reference;
    use super::*;

    const CTX: &str = "Canada introduced a carbon contract for difference in 2023.";

    #[test]
    fn citations_checked_against_ids_and_ranks() {
        let t = Trace::of(
            "q",
            &[("doc_3", CTX), ("doc_4", CTX)],
            "A [doc_3]. B [doc_9]. C [2]. D [7].",
        );
        assert_eq!(citations(&t), Citations { total: 4, valid: 2 });
    }

    proptest::proptest! {
        #[test]
        fn citations_match_the_reference(
            parts in proptest::collection::vec(proptest::sample::select(reference::fragments()), 0..30),
        ) {
            let text = parts.concat();
            let t = Trace::of("q", &[("doc_1", CTX), ("x", CTX)], &text);
            proptest::prop_assert_eq!(citations(&t), reference::citations(&t), "{:?}", text);
        }
    }
}
