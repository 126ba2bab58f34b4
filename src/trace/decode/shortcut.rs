//! The shortcut: a native trace read by hand when its message has the common shape, about three
//! times cheaper than serde_json's pass over it (most of a trace is context text, which this finds
//! the end of with `memchr` instead of reading it a word at a time).
//!
//! The shortcut only splits the message into its fields: the top-level object into keys and value
//! slices, the `contexts` array into its elements. A string without escapes, a context `{"id":
//! "..", "text": "..", "score": n}` or a bare string context it reads itself; every other value it
//! hands, as its own slice, to serde_json with the field's own type (the type the full decode gives
//! it), so what it reads is what the full decode reads. Anything it is not sure of (an escaped key,
//! a repeated field, a missing one, nesting deeper than [`MAX_DEPTH`], a slice serde_json rejects,
//! bytes after the object) makes it give up, and the full decode reads the message (and finds the
//! error, if there is one).

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::{NativeContext, gold, id_string, native_timestamp_ms, set, set_opt};
use crate::trace::{Context, Metadata, Trace};

/// Nesting of objects the shortcut checks itself, at most.
const MAX_OBJECT_DEPTH: usize = 8;

/// Nesting the shortcut reads into a skipped value at most: well inside serde_json's limit of 128,
/// so that a value it reads on its own could not have failed that limit in place.
const MAX_DEPTH: usize = 100;

/// Reads the trace in `text` into `out`, reusing its strings and contexts, when it has the shape
/// the shortcut reads; `None` sends it to the full decode (with `out` partly overwritten).
pub(super) fn native_into(text: &str, out: &mut Trace) -> Option<()> {
    let mut r = Reader { text, at: 0 };
    r.trace(out)
}

/// A place in a message.
struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    /// Moves past JSON whitespace.
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// After a member of an object or array: past a `,` and true when another follows, false at
    /// `close` (left to the caller), `None` at anything else.
    fn more(&mut self, close: u8) -> Option<bool> {
        self.skip_space();
        match self.peek()? {
            b',' => {
                self.at += 1;
                Some(true)
            }
            b if b == close => Some(false),
            _ => None,
        }
    }

    /// Moves past `byte`, after whitespace, if it is next.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.skip_space();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// The top-level object, into `out`.
    fn trace(&mut self, out: &mut Trace) -> Option<()> {
        let mut trace_id = None;
        let mut timestamp = None;
        let mut query = None;
        let mut contexts = None;
        let mut answer = None;
        let mut stratum = None;
        let mut metadata = None;
        let mut label_faithful = None;
        let mut relevant_ids = None;
        let mut relevance = None;
        self.eat(b'{')?;
        self.skip_space();
        if self.peek()? != b'}' {
            loop {
                self.skip_space();
                let key = self.plain_string()?;
                self.eat(b':')?;
                self.skip_space();
                // A repeated field (`Some` already) gives up: serde's derive rejects it.
                match key {
                    "trace_id" if trace_id.is_none() => trace_id = Some(self.string()?),
                    "query" if query.is_none() => query = Some(self.string()?),
                    "answer" if answer.is_none() => answer = Some(self.string()?),
                    "contexts" if contexts.is_none() => {
                        self.contexts(&mut out.contexts)?;
                        contexts = Some(());
                    }
                    "timestamp" if timestamp.is_none() => timestamp = Some(self.value()?),
                    "stratum" if stratum.is_none() => {
                        stratum = Some(match self.peek()? {
                            b'"' => Some(self.string()?),
                            _ => self.value()?,
                        });
                    }
                    "metadata" if metadata.is_none() => {
                        // Kept as its text, checked as the full decode's `Value` would be.
                        let start = self.at;
                        if self.plain_object(0).is_none() {
                            self.at = start;
                            self.skip_value()?;
                            if !Metadata::check(self.text.get(start..self.at)?) {
                                return None;
                            }
                        }
                        metadata = Some(self.text.get(start..self.at)?);
                    }
                    "label_faithful" if label_faithful.is_none() => {
                        label_faithful = Some(self.value()?);
                    }
                    "relevant_ids" if relevant_ids.is_none() => relevant_ids = Some(self.value()?),
                    "relevance" if relevance.is_none() => relevance = Some(self.value()?),
                    "trace_id" | "query" | "answer" | "contexts" | "timestamp" | "stratum"
                    | "metadata" | "label_faithful" | "relevant_ids" | "relevance" => return None,
                    _ => {
                        self.value::<IgnoredAny>()?;
                    }
                }
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        self.at += 1;
        self.skip_space();
        if self.at != self.text.len() {
            return None;
        }
        let (trace_id, query, answer, ()) = (trace_id?, query?, answer?, contexts?);
        set(&mut out.trace_id, &trace_id);
        out.timestamp_ms = native_timestamp_ms(timestamp.flatten());
        set(&mut out.query, &query);
        set(&mut out.answer, &answer);
        set_opt(&mut out.stratum, stratum.flatten().as_deref());
        match metadata {
            Some(text) => out.metadata.set_checked_text(text),
            None => out.metadata = Metadata::default(),
        }
        out.label_faithful = label_faithful.flatten();
        out.gold = gold(relevant_ids.flatten(), relevance.flatten());
        Some(())
    }

    /// A string without escapes or control characters, borrowed; `None` for anything else.
    fn plain_string(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let end = match short_string_len(&self.bytes()[start..]) {
            Short::Plain(len) => start + len,
            Short::Other => return None,
            Short::Long => {
                let end = start + memchr::memchr2(b'"', b'\\', &self.bytes()[start..])?;
                if self.bytes()[end] != b'"' || has_control(&self.bytes()[start..end]) {
                    return None;
                }
                end
            }
        };
        self.at = end + 1;
        // Both ends are ASCII quotes, so char boundaries of the (valid UTF-8) text.
        self.text.get(start..end)
    }

    /// A string value: plain, or (escaped) read by serde_json.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let at = self.at;
        match self.plain_string() {
            Some(s) => Some(Cow::Borrowed(s)),
            None => {
                self.at = at;
                self.value()
            }
        }
    }

    /// Moves past an object of plain keys and plain strings, small unsigned integers, booleans,
    /// nulls and such objects (nested at most [`MAX_OBJECT_DEPTH`] deep): JSON that serde_json
    /// reads into a `Value` without fail. `None` for anything else (the caller checks that with
    /// serde_json).
    fn plain_object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_OBJECT_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        self.skip_space();
        if self.peek()? != b'}' {
            loop {
                self.skip_space();
                self.plain_string()?;
                self.eat(b':')?;
                self.skip_space();
                match self.peek()? {
                    b'"' => self.plain_string().map(|_| ())?,
                    b'{' => self.plain_object(depth + 1)?,
                    b'0'..=b'9' => self.small_integer()?,
                    b't' => self.word("true")?,
                    b'f' => self.word("false")?,
                    b'n' => self.word("null")?,
                    _ => return None,
                }
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        self.at += 1;
        Some(())
    }

    /// Moves past an unsigned integer of at most 18 digits without a leading zero (so within a
    /// `u64`) ended by a delimiter; `None` for any other number.
    fn small_integer(&mut self) -> Option<()> {
        let rest = &self.bytes()[self.at..];
        let len = rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(rest.len());
        if len == 0 || len > 18 || (len > 1 && rest[0] == b'0') || !ends_value(rest.get(len)) {
            return None;
        }
        self.at += len;
        Some(())
    }

    /// Moves past `word` when the next bytes are it, ended by a delimiter.
    fn word(&mut self, word: &str) -> Option<()> {
        let rest = &self.bytes()[self.at..];
        if !rest.starts_with(word.as_bytes()) || !ends_value(rest.get(word.len())) {
            return None;
        }
        self.at += word.len();
        Some(())
    }

    /// The next value, read on its own by serde_json as a `T`.
    fn value<T: Deserialize<'a>>(&mut self) -> Option<T> {
        let start = self.at;
        self.skip_value()?;
        serde_json::from_str(self.text.get(start..self.at)?).ok()
    }

    /// The `contexts` array into `out`, each context made a [`Context`] as the full decode makes it,
    /// in the place (and the strings) of one that was there.
    fn contexts(&mut self, out: &mut Vec<Context>) -> Option<()> {
        if self.peek()? != b'[' {
            return None;
        }
        self.at += 1;
        let mut n = 0;
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
            out.clear();
            return Some(());
        }
        loop {
            self.skip_space();
            if n == out.len() {
                out.push(Context {
                    id: None,
                    text: String::new(),
                    score: None,
                });
            }
            let slot = &mut out[n];
            let start = self.at;
            if self.context(slot).is_none() {
                self.at = start;
                let c: NativeContext<'a> = self.value()?;
                *slot = Context {
                    id: c.id.and_then(id_string),
                    text: c.text.into_owned(),
                    score: c.score,
                };
            }
            slot.score = slot.score.filter(|s| s.is_finite());
            n += 1;
            if !self.more(b']')? {
                self.at += 1;
                out.truncate(n);
                return Some(());
            }
        }
    }

    /// A context of the common shape into `slot`: a plain string, or an object of plain `id` and
    /// `text` and a number or null `score`, each at most once; `None` for anything else (`slot`
    /// untouched).
    fn context(&mut self, slot: &mut Context) -> Option<()> {
        if self.peek()? == b'"' {
            let text = self.plain_string()?;
            set(&mut slot.text, text);
            (slot.id, slot.score) = (None, None);
            return Some(());
        }
        self.eat(b'{')?;
        let (mut id, mut text, mut score) = (None, None, None);
        self.skip_space();
        if self.peek()? != b'}' {
            loop {
                self.skip_space();
                match self.plain_string()? {
                    "id" if id.is_none() => {
                        self.eat(b':')?;
                        self.skip_space();
                        id = Some(self.plain_string()?);
                    }
                    "text" if text.is_none() => {
                        self.eat(b':')?;
                        self.skip_space();
                        text = Some(self.plain_string()?);
                    }
                    "score" if score.is_none() => {
                        self.eat(b':')?;
                        self.skip_space();
                        score = Some(self.value::<Option<f64>>()?);
                    }
                    _ => return None,
                }
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        self.at += 1;
        set(&mut slot.text, text?);
        set_opt(&mut slot.id, id);
        slot.score = score.flatten();
        Some(())
    }

    /// Moves past the next value without reading it: a string, an object or array (strings in it
    /// skipped whole), or a scalar up to the next delimiter. serde_json reads the slice afterwards.
    fn skip_value(&mut self) -> Option<()> {
        let b = self.bytes();
        let mut depth = 0usize;
        loop {
            match *b.get(self.at)? {
                b'"' => self.skip_string()?,
                b'{' | b'[' => {
                    depth += 1;
                    if depth > MAX_DEPTH {
                        return None;
                    }
                    self.at += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    self.at += 1;
                }
                _ if depth > 0 => self.at += 1,
                _ => {
                    let rest = &b[self.at..];
                    let len = rest
                        .iter()
                        .position(|c| {
                            matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                        })
                        .unwrap_or(rest.len());
                    self.at += len.max(1);
                }
            }
            if depth == 0 {
                return Some(());
            }
        }
    }

    /// Moves past a string, escapes and all.
    fn skip_string(&mut self) -> Option<()> {
        let b = self.bytes();
        let mut at = self.at + 1;
        loop {
            at += memchr::memchr2(b'"', b'\\', b.get(at..)?)?;
            if b[at] == b'"' {
                self.at = at + 1;
                return Some(());
            }
            at += 2;
        }
    }
}

/// Whether a scalar ends before `next`: a delimiter (not the end of the text: the message is cut).
fn ends_value(next: Option<&u8>) -> bool {
    matches!(
        next,
        Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
    )
}

/// What the first [`SHORT`] bytes of a string's body (after its opening quote) tell.
#[derive(Debug, PartialEq, Eq)]
enum Short {
    /// A plain string of this many bytes: its closing quote comes first.
    Plain(usize),
    /// An escape or a control character comes first, or the text ends: not a plain string.
    Other,
    /// Neither within [`SHORT`] bytes: a longer string, for `memchr`.
    Long,
}

/// Bytes of a string looked at eight at a time before handing it to `memchr`: keys, ids and most
/// short values end within them, and three word tests are cheaper than `memchr`'s setup for those.
const SHORT: usize = 24;

/// The first of a closing quote, an escape or a control character in the first [`SHORT`] bytes of
/// `body`.
#[inline]
fn short_string_len(body: &[u8]) -> Short {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    // A byte's top bit set where a byte is zero, exact at the lowest such byte (a borrow only
    // flags bytes above one that is).
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGH;
    let mut at = 0;
    while at + 8 <= body.len().min(SHORT) {
        let w = u64::from_le_bytes(body[at..at + 8].try_into().expect("eight bytes"));
        // Each test is exact at its lowest flagged byte, so the lowest flag of all three is.
        let stops = zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGH);
        if stops != 0 {
            let i = at + stops.trailing_zeros() as usize / 8;
            return if body[i] == b'"' {
                Short::Plain(i)
            } else {
                Short::Other
            };
        }
        at += 8;
    }
    for (i, &b) in body.iter().enumerate().take(SHORT).skip(at) {
        match b {
            b'"' => return Short::Plain(i),
            b'\\' | 0..=0x1F => return Short::Other,
            _ => {}
        }
    }
    if body.len() <= SHORT {
        Short::Other
    } else {
        Short::Long
    }
}

/// Whether `bytes` holds a control character, which a JSON string may not.
fn has_control(bytes: &[u8]) -> bool {
    // The lowest byte of each 64-byte block, a fold without a branch per byte that the compiler
    // turns into vector minimums; stops at the first block that has one.
    let lowest = |block: &[u8]| block.iter().fold(u8::MAX, |low, &b| low.min(b));
    let mut blocks = bytes.chunks_exact(64);
    for block in &mut blocks {
        if lowest(block) < 0x20 {
            return true;
        }
    }
    lowest(blocks.remainder()) < 0x20
}

#[cfg(test)]
mod tests {
    use super::super::NativeTrace;
    use super::*;

    /// What the full decode makes of `text` (the trace, or the error's reason).
    fn full(text: &str) -> Result<Trace, &'static str> {
        serde_json::from_str::<NativeTrace<'_>>(text)
            .map(NativeTrace::into_trace)
            .map_err(|e| super::super::classify(e).reason.as_str())
    }

    /// A trace that held another message: more contexts, ids, metadata, stratum and gold, for the
    /// shortcut to overwrite.
    fn used() -> Trace {
        full(
            r#"{"trace_id":"old-id-longer","timestamp":5,"query":"old","contexts":[{"id":"a","text":"one","score":0.5},{"id":"b","text":"two"},"three",{"id":"d","text":"four","score":1}],"answer":"old answer","stratum":"head","metadata":{"m":1},"label_faithful":false,"relevant_ids":["a"],"relevance":{"a":1}}"#,
        )
        .expect("a valid trace")
    }

    /// The shortcut's trace of `text`, read into a fresh trace and into a used one (the same, or
    /// the shortcut gave up on both).
    fn native(text: &str) -> Option<Trace> {
        let (mut fresh, mut reused) = (Trace::default(), used());
        let a = native_into(text, &mut fresh).map(|()| fresh);
        let b = native_into(text, &mut reused).map(|()| reused);
        assert_eq!(a, b, "{text}");
        a
    }

    /// Whenever the shortcut reads a message, the full decode reads the same trace from it.
    fn agrees(text: &str) -> bool {
        match native(text) {
            None => false,
            Some(t) => {
                assert_eq!(Ok(t), full(text), "{text}");
                true
            }
        }
    }

    #[test]
    fn reads_the_common_shape_as_the_full_decode_does() {
        for text in [
            r#"{"trace_id":"t","timestamp":"2026-11-29T10:00:00Z","query":"q?","contexts":[{"id":"d","text":"a b","score":0.9},"plain",{"text":"x","score":null},{"score":1,"text":"y","id":"e"}],"answer":"x","stratum":"head","metadata":{"model":"m","usage":{"prompt_tokens":120,"completion_tokens":30}},"label_faithful":true}"#,
            r#" { "trace_id" : "t" , "query" : "q" , "contexts" : [ ] , "answer" : "" } "#,
            r#"{"trace_id":"t\n","query":"\u00e9","contexts":["a\"b",{"id":7,"text":"c"},{"id":null,"text":"d","extra":[1]}],"answer":"a","stratum":null,"metadata":null,"timestamp":1795946400123,"label_faithful":null}"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","label_spans":[{"start":1,"text":"é"}],"relevant_ids":["d"],"relevance":{"d":2}}"#,
            r#"{"trace_id":"t","query":"q","contexts":[{"text":"a","score":-0}],"answer":"a","timestamp":-5}"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","metadata":{"a":1,"a":"x","b":{"c":true,"d":false,"e":null,"f":{}},"g":0,"h":123456789012345678}}"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","metadata":{"a":1234567890123456789012,"b":-1,"c":1.5,"d":[1],"e":"\n","f":18446744073709551615}}"#,
            // An ignored field is not read as a number: out of range is no error.
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","x":1e400}"#,
        ] {
            assert!(agrees(text), "{text}");
        }
    }

    #[test]
    fn gives_up_on_what_the_full_decode_rejects() {
        let deep = format!(
            r#"{{"trace_id":"t","query":"q","contexts":[],"answer":"a","metadata":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for text in [
            "",
            "{}",
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a""#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a"} x"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a",}"#,
            r#"{"trace_id":"t","trace_id":"u","query":"q","contexts":[],"answer":"a"}"#,
            r#"{"trace_id":"t","query":"q","contexts":[{"text":"a","text":"b"}],"answer":"a"}"#,
            r#"{"trace_id":"t","query":"q","contexts":[{"text":"a","score":"high"}],"answer":"a"}"#,
            r#"{"trace_id":"t","query":"q","contexts":[5],"answer":"a"}"#,
            r#"{"trace_id":"t","query":3,"contexts":[],"answer":"a"}"#,
            "{\"trace_id\":\"t\u{1}\",\"query\":\"q\",\"contexts\":[],\"answer\":\"a\"}",
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","metadata":1e400}"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","x":tru}"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","timestamp":[}"#,
            r#"{"trace_id":"t","query":"q","contexts":null,"answer":"a"}"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","metadata":{"a":01}}"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","metadata":{"a":truex}}"#,
            r#"{"trace_id":"t","query":"q","contexts":[],"answer":"a","metadata":{"a":1,}}"#,
            &deep,
        ] {
            assert!(native(text).is_none(), "{text}");
            assert!(full(text).is_err(), "{text}");
        }
    }

    /// JSON values for the fields, as the full decode's tests make them (spaced, and nested just
    /// below serde_json's limit).
    fn value() -> impl proptest::strategy::Strategy<Value = String> {
        super::super::tests::json_value(126, true)
    }

    #[test]
    fn control_characters_are_found_anywhere() {
        for len in 0..100 {
            let plain = vec![b'a'; len];
            assert!(!has_control(&plain));
            for at in 0..len {
                for c in [0u8, 0x1f, b'\n'] {
                    let mut bytes = plain.clone();
                    bytes[at] = c;
                    assert!(has_control(&bytes), "{len} {at}");
                }
                let mut bytes = plain.clone();
                bytes[at] = 0x20;
                if at > 0 {
                    bytes[at - 1] = 0xff;
                }
                assert!(!has_control(&bytes));
            }
        }
    }

    /// The byte loop for short strings and `memchr` for long ones read every string as one pass of
    /// the whole string would: a plain string's end, or nothing at an escape, a control character
    /// or a missing closing quote, wherever it falls around the hand-over at [`SHORT`] bytes.
    #[test]
    fn plain_strings_end_where_a_whole_pass_says() {
        let reference = |body: &[u8]| -> Option<usize> {
            let end = body.iter().position(|&b| b == b'"' || b == b'\\')?;
            (body[end] == b'"' && body[..end].iter().all(|&b| b >= 0x20)).then_some(end)
        };
        for len in 0..2 * SHORT + 2 {
            for at in 0..=len {
                // Filler around the thresholds of the word tests, and non-ASCII (2-byte) text.
                let fillers: [&[u8]; 2] = [b" !#[]~\x7fa", "\u{e9}".as_bytes()];
                for (filler, stop) in fillers.iter().flat_map(|f| {
                    [Some(b'"'), Some(b'\\'), Some(0u8), Some(0x1f), None].map(|s| (f, s))
                }) {
                    if filler.len() == 2 && (len % 2 == 1 || at % 2 == 1) {
                        continue;
                    }
                    let mut body: Vec<u8> = filler.iter().copied().cycle().take(len).collect();
                    if let Some(b) = stop {
                        if at == len {
                            body.push(b);
                        } else {
                            body[at] = b;
                            if filler.len() == 2 {
                                // The rest of the replaced character.
                                body[at + 1] = b'a';
                            }
                        }
                    }
                    // Something after the body, as a message has (or not: the text ends).
                    for tail in [&b""[..], b"\",\"x\"", b"\\\""] {
                        let mut text = b"\"".to_vec();
                        text.extend_from_slice(&body);
                        text.extend_from_slice(tail);
                        let text = String::from_utf8(text).unwrap();
                        let mut r = Reader { text: &text, at: 0 };
                        let want = reference(&text.as_bytes()[1..]);
                        let got = r.plain_string().map(str::len);
                        assert_eq!(got, want, "{text:?}");
                        if let Some(n) = got {
                            assert_eq!(r.at, n + 2);
                        }
                    }
                }
            }
        }
    }

    fn string() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            4 => "[ !#-\\[\\]-~é]{0,12}".prop_map(|s| format!(r#""{s}""#)),
            1 => Just(r#""a\"b\u00e9\n""#.to_owned()),
            1 => Just("\"ctl\u{1f}\"".to_owned()),
            1 => Just(r#""\ud800""#.to_owned()),
            1 => Just("7".to_owned()),
        ]
    }

    fn context() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let field = prop_oneof![
            3 => string().prop_map(|s| format!(r#""text":{s}"#)),
            2 => string().prop_map(|s| format!(r#""id":{s}"#)),
            1 => Just(r#""id":null"#.to_owned()),
            1 => Just(r#""id":7.5"#.to_owned()),
            2 => Just(r#""score":0.5"#.to_owned()),
            1 => Just(r#""score":null"#.to_owned()),
            1 => Just(r#""score":-0"#.to_owned()),
            1 => Just(r#""score":1e400"#.to_owned()),
            1 => Just(r#""score":"high""#.to_owned()),
            1 => value().prop_map(|v| format!(r#""other":{v}"#)),
        ];
        prop_oneof![
            4 => proptest::collection::vec(field, 0..4)
                .prop_map(|fields| format!("{{{}}}", fields.join(","))),
            2 => string(),
            1 => value(),
        ]
    }

    fn message() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let key = prop_oneof![
            3 => Just(r#""trace_id""#),
            3 => Just(r#""query""#),
            3 => Just(r#""answer""#),
            3 => Just(r#""contexts""#),
            1 => Just(r#""timestamp""#),
            1 => Just(r#""stratum""#),
            1 => Just(r#""metadata""#),
            1 => Just(r#""label_faithful""#),
            1 => Just(r#""relevant_ids""#),
            1 => Just(r#""relevance""#),
            1 => Just(r#""label_spans""#),
            1 => Just(r#""quer\u0079""#),
        ];
        proptest::collection::vec((key, value()), 0..9).prop_map(|fields| {
            let fields: Vec<String> = fields.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            format!("{{{}}}", fields.join(","))
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn whatever_the_shortcut_reads_the_full_decode_reads_alike(
            text in message(),
            cut in proptest::option::of(0usize..300),
        ) {
            let mut text = text;
            if let Some(cut) = cut.filter(|&c| c < text.len() && text.is_char_boundary(c)) {
                text.truncate(cut);
            }
            agrees(&text);
        }

        #[test]
        fn messages_with_the_required_fields_read_alike(
            strings in proptest::collection::vec(string(), 3),
            contexts in proptest::collection::vec(context(), 0..4),
            extra in message(),
        ) {
            let extra = extra.trim_start_matches('{').trim_end_matches('}');
            let message = format!(
                r#"{{"trace_id":{},"query":{},"contexts":[{}],"answer":{}{}{extra}}}"#,
                strings[0],
                strings[1],
                contexts.join(","),
                strings[2],
                if extra.is_empty() { "" } else { "," },
            );
            agrees(&message);
        }

        #[test]
        fn plain_messages_take_the_shortcut(
            ids in proptest::collection::vec("[a-z0-9_]{1,8}", 0..5),
            text in "[ -~]{0,40}",
            score in proptest::option::of(0.0f64..1.0),
        ) {
            let text = text.replace(['"', '\\'], "");
            let contexts: Vec<String> = ids
                .iter()
                .map(|id| match score {
                    Some(s) => format!(r#"{{"id":"{id}","text":"{text}","score":{s}}}"#),
                    None => format!(r#""{text}""#),
                })
                .collect();
            let message = format!(
                r#"{{"trace_id":"t","query":"{text}","contexts":[{}],"answer":"{text}","metadata":{{"model":"m"}}}}"#,
                contexts.join(",")
            );
            proptest::prop_assert!(agrees(&message), "{}", message);
        }
    }
}
