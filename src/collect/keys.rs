//! The strings of grouped nodes (`group_by`), as BPF sends them (raw first bytes) -> the text
//! the tree shows: literals folded by the same [`KeyScanner`] whose output BPF hashed, so
//! two calls share a node exactly when they share this text.

use wprof_common::{KeyScanner, NodeKey, KEY_BYTES};

/// Marks a string that was longer than the bytes BPF reads (its calls are grouped by this
/// prefix).
pub const TRUNCATED: char = '…';

/// The folded text of a grouped node's first string, with [`TRUNCATED`] when BPF may have
/// cut it (a C string of `KEY_BYTES - 1` bytes, a pointer + length one of `KEY_BYTES`).
pub fn folded(key: &NodeKey) -> String {
    let len = (key.len as usize).min(KEY_BYTES);
    let mut out = fold(&key.text[..len]);
    if len >= KEY_BYTES - 1 {
        out.push(TRUNCATED);
    }
    out
}

/// Folds the literals of `raw` (see [`KeyScanner`]; leading white space goes, a run of it
/// anywhere else is one space); invalid UTF-8 is replaced, not refused: the bytes are the
/// traced program's.
pub fn fold(raw: &[u8]) -> String {
    let mut scan = KeyScanner::default();
    // Every byte BPF hashed (`len` of them: a C string's NUL is not among them).
    let bytes: Vec<u8> = raw.iter().filter_map(|c| scan.step(*c)).collect();
    // Not trimmed: BPF hashed every emitted byte, a trailing space included.
    escape_controls(&String::from_utf8_lossy(&bytes))
}

/// `text` with each control character written as `\xNN` (`\u{NNNN}` beyond ASCII): a string
/// from the traced program (any SQL client's statement) must not drive the terminal, break an
/// SVG's XML or split a CSV row in any output.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(
            fold(b"SELECT x /* \x1b[31m \x01 */ FROM t"),
            "SELECT x /* \\x1b[? \\x01 */ FROM t"
        );
        assert_eq!(escape_controls("a\u{85}b"), "a\\u{0085}b");
    }

    #[test]
    fn literals_fold_identifiers_stay() {
        assert_eq!(
            fold(b"DELETE FROM changes_16384 WHERE lsn <= '0/1A2B3C' AND n > 42"),
            "DELETE FROM changes_16384 WHERE lsn <= ? AND n > ?"
        );
        assert_eq!(
            fold(b"SELECT $1, 1.5e3, 0x1F, \"col 7\"  FROM\n\tt"),
            "SELECT $1, ?, ?, \"col ?\" FROM t"
        );
    }

    #[test]
    fn leading_white_space_folds_away_a_trailing_run_is_one_space() {
        assert_eq!(fold(b"\n    SELECT 1\n  "), "SELECT ? ");
        assert_eq!(fold(b"   "), "");
    }

    #[test]
    fn statements_differing_in_constants_fold_alike() {
        let a = fold(b"MERGE INTO st USING (SELECT * FROM d WHERE lsn > '0/16' AND lsn <= '0/FF')");
        let b = fold(b"MERGE INTO st USING (SELECT * FROM d WHERE lsn > '1/2' AND lsn <= '9/0')");
        assert_eq!(a, b);
        assert_ne!(a, fold(b"MERGE INTO st2 USING (SELECT 1)"));
    }

    #[test]
    fn a_full_buffer_is_marked_truncated() {
        let mut k = NodeKey {
            kind: 7,
            len: 3,
            node: 1,
            text: [b'x'; KEY_BYTES],
        };
        assert_eq!(folded(&k), "xxx");
        k.len = KEY_BYTES as u32;
        assert!(folded(&k).ends_with(TRUNCATED));
        k.text[..5].copy_from_slice(b"ab'c\0");
        k.len = 5;
        assert_eq!(folded(&k), "ab?");
    }
}
