//! How the judge stand-in reads a request: the bodies of ragwatch's prompt elements (`<answer>`,
//! `<context n="1">`, `<claims>`), lower-cased words, an answer's sentences, and the number of
//! questions a relevancy prompt asks for.

/// The bodies of every `<open ...>body</close>` in `text`.
pub fn between<'a>(text: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(open) {
        let after = &rest[i + open.len()..];
        let start = after.find('>').map(|j| j + 1).unwrap_or(0);
        let body = &after[start..];
        match body.find(close) {
            Some(end) => {
                out.push(&body[..end]);
                rest = &body[end + close.len()..];
            }
            None => break,
        }
    }
    out
}

/// The body of the first `<name ...>` element of `text`, or empty.
pub fn first(text: &str, name: &str) -> String {
    between(text, &format!("<{name}"), &format!("</{name}>"))
        .first()
        .map(|b| b.to_string())
        .unwrap_or_default()
}

/// The lower-cased alphanumeric words of `s`.
pub fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The answer's pieces between `.`, `!` and `?` of three words or more, trimmed.
pub fn sentences(answer: &str) -> Vec<String> {
    answer
        .split(['.', '!', '?'])
        .map(str::trim)
        .filter(|s| s.split_whitespace().count() >= 3)
        .map(str::to_owned)
        .collect()
}

/// The answer's sentences of three words or more, each with its closing mark (a mark followed by
/// whitespace or the end ends one); the whole answer when it has none.
pub fn claims_of(answer: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = answer.char_indices().collect();
    for (i, &(at, c)) in chars.iter().enumerate() {
        let ends = matches!(c, '.' | '!' | '?')
            && chars.get(i + 1).is_none_or(|&(_, n)| n.is_whitespace());
        if ends {
            out.push(answer[start..at + c.len_utf8()].trim().to_owned());
            start = at + c.len_utf8();
        }
    }
    out.push(answer[start..].trim().to_owned());
    out.retain(|s| s.split_whitespace().count() >= 3);
    if out.is_empty() && !answer.trim().is_empty() {
        out.push(answer.trim().to_owned());
    }
    out
}

/// The number of questions a relevancy request asks for (its system prompt's second word), 3 if
/// it does not say.
pub fn questions_asked(system: &str) -> usize {
    system
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// The claims handed to the verification call of the two-call form (`<claims>` holds a JSON list).
pub fn given_claims(user: &str) -> Vec<String> {
    between(user, "<claims", "</claims>")
        .first()
        .and_then(|c| serde_json::from_str::<Vec<String>>(c).ok())
        .unwrap_or_default()
}
