//! JSON string literals written straight into a buffer, escaped as
//! `serde_json` escapes them: attribution writes a few KB of paths and
//! names into every patched answer, and a serializer would write each
//! escape as a separate fragment.

/// The bytes a JSON string escapes: the control characters, the quote and
/// the backslash. All are ASCII, so the text between escapes is always
/// whole characters.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Where a quoted string is written: a `String` or the bytes of a JSON text.
pub(crate) trait QuotedOut {
    /// Appends `text`.
    fn put(&mut self, text: &str);
    /// Makes room for `more` bytes.
    fn reserve_for(&mut self, more: usize);
}

impl QuotedOut for String {
    fn put(&mut self, text: &str) {
        self.push_str(text);
    }
    fn reserve_for(&mut self, more: usize) {
        self.reserve(more);
    }
}

impl QuotedOut for Vec<u8> {
    fn put(&mut self, text: &str) {
        self.extend_from_slice(text.as_bytes());
    }
    fn reserve_for(&mut self, more: usize) {
        self.reserve(more);
    }
}

/// Appends `text` as a JSON string, quoted.
pub(crate) fn push_quoted(out: &mut impl QuotedOut, text: &str) {
    let bytes = text.as_bytes();
    // Room for the text, its quotes and a few escapes: one growth at most.
    out.reserve_for(bytes.len() + bytes.len() / 4 + 2);
    out.put("\"");
    let mut plain = 0;
    // Control characters are rare: without them only quotes and
    // backslashes need escaping, found by `memchr` many bytes at a time
    // (the check for them is one vectorized pass).
    if bytes.iter().fold(false, |control, &b| control | (b < 0x20)) {
        let escaped = (0..bytes.len()).filter(|&at| NEEDS_ESCAPE[usize::from(bytes[at])]);
        for at in escaped {
            plain = escape(out, text, plain, at);
        }
    } else {
        for at in memchr::memchr2_iter(b'"', b'\\', bytes) {
            plain = escape(out, text, plain, at);
        }
    }
    out.put(&text[plain..]);
    out.put("\"");
}

/// Writes `text` from `plain` up to `at`, then the escape of the byte at
/// `at`; returns where the plain text goes on.
fn escape(out: &mut impl QuotedOut, text: &str, plain: usize, at: usize) -> usize {
    out.put(&text[plain..at]);
    out.put(escape_of(text.as_bytes()[at]));
    at + 1
}

/// The escape of `byte`, one of those [`NEEDS_ESCAPE`] marks.
fn escape_of(byte: u8) -> &'static str {
    match byte {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        _ => CONTROL.get(usize::from(byte)).copied().unwrap_or_default(),
    }
}

/// The escapes of the control characters, by code.
const CONTROL: [&str; 0x20] = [
    "\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006", "\\u0007", "\\b",
    "\\t", "\\n", "\\u000b", "\\f", "\\r", "\\u000e", "\\u000f", "\\u0010", "\\u0011", "\\u0012",
    "\\u0013", "\\u0014", "\\u0015", "\\u0016", "\\u0017", "\\u0018", "\\u0019", "\\u001a",
    "\\u001b", "\\u001c", "\\u001d", "\\u001e", "\\u001f",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut every_ascii = String::new();
        for c in 0u8..0x80 {
            every_ascii.push(char::from(c));
        }
        for text in [
            "a/b",
            "quote\"d",
            "back\\slash",
            "tab\tnew\nline\r",
            "bell\u{7}\u{8}\u{c}\u{1f}",
            "ünï\u{2028}",
            "",
            r#"[{"policy":"p","set":["metadata.labels[\"a\"]"]}]"#,
            &every_ascii,
        ] {
            let expected = serde_json::to_string(text).unwrap();
            let mut string = String::new();
            push_quoted(&mut string, text);
            assert_eq!(string, expected, "{text:?}");
            let mut bytes = Vec::new();
            push_quoted(&mut bytes, text);
            assert_eq!(bytes, expected.as_bytes(), "{text:?}");
        }
    }
}
