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
///
/// The rule is two tables ([`KEY_CLASS`], [`KEY_NEXT`]), built from [`transition`] at compile
/// time, so BPF can run it without a branch per byte: with branches, the verifier explores
/// every combination of the bytes' paths, and on 6.1 that exceeds its budget of a million
/// instructions over 128 bytes.
#[derive(Copy, Clone, Debug)]
pub struct KeyScanner {
    mode: u8,
}

impl Default for KeyScanner {
    /// A scanner at the start of a string: as after white space, so leading white space
    /// folds away.
    fn default() -> Self {
        KeyScanner {
            mode: KEY_START_MODE,
        }
    }
}

/// Scanner modes (what the previous bytes were).
const OTHER: u8 = 0;
const IDENT: u8 = 1;
const NUMBER: u8 = 2;
const QUOTED: u8 = 3;
const SPACE: u8 = 4;

/// The mode a scan starts in (as after white space).
pub const KEY_START_MODE: u8 = SPACE;

/// Byte classes.
const C_OTHER: u8 = 0;
const C_DIGIT: u8 = 1;
const C_WORD: u8 = 2;
const C_QUOTE: u8 = 3;
const C_SPACE: u8 = 4;
const C_DOT: u8 = 5;

/// What a transition emits (bits 4-5 of a [`KEY_NEXT`] entry).
const EMIT_NONE: u8 = 0;
const EMIT_BYTE: u8 = 1;
const EMIT_QUESTION: u8 = 2;
const EMIT_SPACE: u8 = 3;

/// The class of a byte.
const fn class_of(c: u8) -> u8 {
    if c == b'\'' {
        C_QUOTE
    } else if c.is_ascii_digit() {
        C_DIGIT
    } else if c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80 {
        C_WORD
    } else if c == b' ' || c == b'\t' || c == b'\n' || c == b'\r' {
        C_SPACE
    } else if c == b'.' {
        C_DOT
    } else {
        C_OTHER
    }
}

/// The rule: from `mode`, a byte of `class` leads to (next mode, what to emit).
pub const fn transition(mode: u8, class: u8) -> (u8, u8) {
    if mode == QUOTED {
        return if class == C_QUOTE {
            (OTHER, EMIT_NONE)
        } else {
            (QUOTED, EMIT_NONE)
        };
    }
    if class == C_QUOTE {
        return (QUOTED, EMIT_QUESTION);
    }
    if mode == NUMBER && (class == C_DIGIT || class == C_WORD || class == C_DOT) {
        return (NUMBER, EMIT_NONE);
    }
    if class == C_DIGIT {
        return if mode == IDENT {
            (IDENT, EMIT_BYTE)
        } else {
            (NUMBER, EMIT_QUESTION)
        };
    }
    if class == C_WORD {
        return (IDENT, EMIT_BYTE);
    }
    if class == C_SPACE {
        return if mode == SPACE {
            (SPACE, EMIT_NONE)
        } else {
            (SPACE, EMIT_SPACE)
        };
    }
    (OTHER, EMIT_BYTE)
}

/// The class of every byte value.
pub const KEY_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = class_of(c as u8);
        c += 1;
    }
    t
};

/// Entries of [`KEY_NEXT`]: every (mode, class) two `& 7`s can give, so an index is in
/// bounds without a check (a bounds check's panic path is no valid BPF).
pub const KEY_NEXT_LEN: usize = 64;

/// The [`KEY_NEXT`] index of a mode and a byte class.
#[inline(always)]
pub fn key_next_index(mode: u8, class: u8) -> usize {
    ((mode & 7) as usize) << 3 | (class & 7) as usize
}

/// `KEY_NEXT[key_next_index(mode, class)]`: the next mode (bits 0-2) and what to emit (bits
/// 4-5).
pub const KEY_NEXT: [u8; KEY_NEXT_LEN] = {
    let mut t = [0u8; KEY_NEXT_LEN];
    let mut i = 0;
    while i < KEY_NEXT_LEN {
        let (next, emit) = transition((i >> 3) as u8, (i & 7) as u8);
        t[i] = next | emit << 4;
        i += 1;
    }
    t
};

/// Per emit kind: the constant byte it emits (`?`, space), 0 for the byte itself or none.
pub const KEY_EMIT_CONST: [u8; 4] = [0, 0, b'?', b' '];

/// Per emit kind: the mask that keeps the scanned byte (only for "the byte itself").
pub const KEY_EMIT_KEEP: [u8; 4] = [0, 0xff, 0, 0];

/// Per emit kind: all ones when something is emitted (the hash takes the byte), else 0.
pub const KEY_EMIT_MASK: [u64; 4] = [0, u64::MAX, u64::MAX, u64::MAX];

impl KeyScanner {
    /// The byte to emit for `c`, or None when it folds into the previous one.
    #[inline(always)]
    pub fn step(&mut self, c: u8) -> Option<u8> {
        let t = KEY_NEXT[key_next_index(self.mode, KEY_CLASS[c as usize])];
        self.mode = t & 7;
        let emit = (t >> 4) & 3;
        (emit != EMIT_NONE)
            .then_some(KEY_EMIT_CONST[emit as usize] | (c & KEY_EMIT_KEEP[emit as usize]))
    }
}

/// FNV-1a offset basis: the hash of an empty key.
pub const KEY_HASH_START: u64 = 0xcbf2_9ce4_8422_2325;

/// One emitted byte into an FNV-1a hash.
#[inline(always)]
pub fn key_hash_step(h: u64, c: u8) -> u64 {
    (h ^ c as u64).wrapping_mul(0x0000_0100_0000_01b3)
}
