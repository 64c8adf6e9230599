//! Grouping a phase's calls by a string argument (`group_by` in a profile): the SQL text
//! passed to `SPI_execute`, a Rust `&str`, a Go `string`.
//!
//! At the entry of such a phase BPF reads the first [`KEY_BYTES`] bytes of the string,
//! folds its literals ([`KeyScanner`]) and mixes a hash of the folded text into the call's tree
//! node, so every distinct statement gets a subtree of its own (in both aggregation modes),
//! while the same statement with other constants (`WHERE lsn > '0/1A2B'`, `LIMIT 100`) stays
//! one node. The first call of each node sends its raw text as a [`NodeKey`] record just
//! before the node's definition; userspace folds it with the same scanner for display.

/// Bytes of a string argument read at each call (and hashed). Longer strings are grouped by
/// this prefix.
pub const KEY_BYTES: usize = 128;

/// Bit 16 of a cookie (phase ids stay below 2^16): the phase groups its calls by a string
/// argument; `PHASE_KEYS[phase]` says which.
pub const COOKIE_KEY_BIT: u64 = 1 << 16;

/// Mask of a cookie's phase id.
pub const COOKIE_PHASE_MASK: u64 = 0xffff;

/// A NUL-terminated C string (`const char *`) at the argument.
pub const KEY_CSTR: u32 = 1;

/// A pointer and a length in two consecutive argument registers: a Rust `&str`/`&[u8]`, a Go
/// `string`.
pub const KEY_PTR_LEN: u32 = 2;

/// Which string argument a phase groups its calls by. Values of the `PHASE_KEYS` array,
/// indexed by phase id.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseKey {
    /// Argument index (0-based, in the phase's calling convention: System V, or Go's register
    /// ABI for Go sites).
    pub arg: u32,
    /// [`KEY_CSTR`] or [`KEY_PTR_LEN`]; 0 when the phase groups nothing.
    pub kind: u32,
}

/// The ring-buffer record that names a grouped node: the raw first bytes of the string its
/// first call had. Starts with its kind, as every record does.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct NodeKey {
    /// [`EventKind::NodeKey`](crate::EventKind::NodeKey) as u32.
    pub kind: u32,
    /// Valid bytes in `text`.
    pub len: u32,
    /// The tree node (path hash) the text names.
    pub node: u64,
    /// The string's first bytes, as read.
    pub text: [u8; KEY_BYTES],
}

/// Folds a string's literals as it is scanned byte by byte, so statements that differ only in
/// constants read the same: a quoted literal (`'…'`) and a number that does not continue an
/// identifier (`42`, `1.5e3`, `0x1F`) become `?`, runs of white space one space. Digits inside
/// identifiers (`changes_16384`, `$1`) are kept. BPF hashes the bytes it emits and userspace
/// prints them: one rule for both.
#[derive(Copy, Clone, Debug, Default)]
pub struct KeyScanner {
    mode: u8,
}

const OTHER: u8 = 0;
const IDENT: u8 = 1;
const NUMBER: u8 = 2;
const QUOTED: u8 = 3;
const SPACE: u8 = 4;

impl KeyScanner {
    /// The byte to emit for `c`, or None when it folds into the previous one.
    #[inline(always)]
    pub fn step(&mut self, c: u8) -> Option<u8> {
        let mode = self.mode;
        if mode == QUOTED {
            if c == b'\'' {
                self.mode = OTHER;
            }
            return None;
        }
        if c == b'\'' {
            self.mode = QUOTED;
            return Some(b'?');
        }
        let digit = c.is_ascii_digit();
        let word = c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80;
        if mode == NUMBER && (digit || word || c == b'.') {
            return None;
        }
        if digit {
            if mode == IDENT {
                return Some(c);
            }
            self.mode = NUMBER;
            return Some(b'?');
        }
        if word {
            self.mode = IDENT;
            return Some(c);
        }
        if c == b' ' || c == b'\t' || c == b'\n' || c == b'\r' {
            if mode == SPACE {
                return None;
            }
            self.mode = SPACE;
            return Some(b' ');
        }
        self.mode = OTHER;
        Some(c)
    }
}

/// FNV-1a offset basis: the hash of an empty key.
pub const KEY_HASH_START: u64 = 0xcbf2_9ce4_8422_2325;

/// One emitted byte into an FNV-1a hash.
#[inline(always)]
pub fn key_hash_step(h: u64, c: u8) -> u64 {
    (h ^ c as u64).wrapping_mul(0x0000_0100_0000_01b3)
}
