//! A token: what the tokenizer makes of a word or number, a hash and a few flags.

/// One token of text: its hash, and whether it is a number or a capitalised name in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    /// Hash of the normalised form.
    pub(crate) hash: u64,
    /// A number (digits, after removing separators and units).
    pub(crate) number: bool,
    /// Capitalised in the source and not at the start of a sentence: likely a name.
    pub(crate) name: bool,
    /// A word of seven or more bytes, lowercased (letters, in ASCII): specific terms rather than
    /// glue.
    pub(crate) long: bool,
    /// Hash of the first five characters: a cruder stem that lets morphological variants meet.
    pub(crate) prefix: u64,
}
