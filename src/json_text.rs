//! JSON string literals written straight into a buffer, escaped as
//! `serde_json` escapes them: attribution writes a few KB of paths and
//! names into every patched answer, and a serializer would write each
//! escape as a separate fragment.

/// For each byte: the character that follows the backslash of its escape,
/// `u` for `\u00XX`, 0 when it stands as it is. Every byte that needs an
/// escape is ASCII, so the text between escapes is always whole characters.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The first byte at or after `from` that needs an escape: its index and
/// the character after its backslash.
fn next_escape(bytes: &[u8], from: usize) -> Option<(usize, u8)> {
    let at = from
        + bytes[from..]
            .iter()
            .position(|&b| ESCAPE[usize::from(b)] != 0)?;
    Some((at, ESCAPE[usize::from(bytes[at])]))
}

/// Appends `text` as a JSON string, quoted.
pub(crate) fn push_quoted(out: &mut String, text: &str) {
    out.push('"');
    let mut plain = 0;
    while let Some((at, escape)) = next_escape(text.as_bytes(), plain) {
        out.push_str(&text[plain..at]);
        out.push('\\');
        out.push(char::from(escape));
        if escape == b'u' {
            let byte = text.as_bytes()[at];
            out.push_str("00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        plain = at + 1;
    }
    out.push_str(&text[plain..]);
    out.push('"');
}

/// Appends `text` as a JSON string, quoted, to JSON bytes.
pub(crate) fn extend_quoted(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    // Room for the text, its quotes and a few escapes: one growth at most.
    out.reserve(bytes.len() + bytes.len() / 4 + 2);
    out.push(b'"');
    let mut plain = 0;
    while let Some((at, escape)) = next_escape(bytes, plain) {
        out.extend_from_slice(&bytes[plain..at]);
        match escape {
            b'u' => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(bytes[at] >> 4)],
                HEX[usize::from(bytes[at] & 0xf)],
            ]),
            _ => out.extend_from_slice(&[b'\\', escape]),
        }
        plain = at + 1;
    }
    out.extend_from_slice(&bytes[plain..]);
    out.push(b'"');
}

/// Appends `json`, the text of a JSON value written compactly (no raw
/// control character in it), as a JSON string, quoted: only its quotes and
/// backslashes need escaping, and those are found by `memchr`, many bytes
/// at a time. Any other text goes through [`extend_quoted`].
pub(crate) fn extend_quoted_json(out: &mut Vec<u8>, json: &str) {
    let bytes = json.as_bytes();
    if bytes.iter().fold(false, |control, &b| control | (b < 0x20)) {
        return extend_quoted(out, json);
    }
    out.reserve(bytes.len() + bytes.len() / 4 + 2);
    out.push(b'"');
    let mut plain = 0;
    for at in memchr::memchr2_iter(b'"', b'\\', bytes) {
        out.extend_from_slice(&bytes[plain..at]);
        out.extend_from_slice(&[b'\\', bytes[at]]);
        plain = at + 1;
    }
    out.extend_from_slice(&bytes[plain..]);
    out.push(b'"');
}

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
            &every_ascii,
        ] {
            let expected = serde_json::to_string(text).unwrap();
            let mut string = String::new();
            push_quoted(&mut string, text);
            assert_eq!(string, expected, "{text:?}");
            let mut bytes = Vec::new();
            extend_quoted(&mut bytes, text);
            assert_eq!(bytes, expected.as_bytes(), "{text:?}");
            let mut from_json = Vec::new();
            extend_quoted_json(&mut from_json, text);
            assert_eq!(from_json, expected.as_bytes(), "{text:?}");
        }
    }
}
