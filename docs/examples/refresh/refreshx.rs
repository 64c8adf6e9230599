//! refreshx: a PostgreSQL 15 extension with the *shape* of pg_trickle's refresh cycle (seed 002),
//! written without pgrx so that it builds in seconds with stable rustc. It is not pg_trickle.
//! What it shares with a pgrx extension, and what docs/user-guide.md shows wprof handling:
//! - the SQL entry point is an exported C symbol `<fn>_wrapper` (plus `pg_finfo_<fn>_wrapper`),
//!   which catches Rust panics (pgrx's `run_guarded` does the same);
//! - the phases are internal Rust functions (`#[inline(never)]`): local symbols with legacy
//!   mangling and a hash suffix when built with stable rustc
//!   (`_ZN8refreshx3cdc21count_pending_changes17h…E`), matched by their demangled path;
//! - the MERGE and the cleanup run through SPI_execute, a function of the postgres binary,
//!   so the executor's work nests under the Rust phases.
//!
//!   rustc +stable --edition 2021 --crate-type cdylib --crate-name refreshx -C opt-level=2 \
//!       -C debuginfo=1 -o refreshx.so refreshx.rs
//!   CREATE FUNCTION refresh_stream_table(int) RETURNS bigint
//!       AS 'refreshx', 'refresh_stream_table_wrapper' LANGUAGE C STRICT;
//!
//! Tables: changes(id int, v int) is the change buffer, st(id int primary key, v int) the stream
//! table. A cycle counts the pending changes, decides, builds the MERGE text, runs it, deletes
//! the consumed changes, and returns the rows merged. `refresh_stream_table(cycle)` panics in
//! the decision step when cycle is a multiple of 50 (caught in the wrapper: the cycle returns -1).
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_long, c_void, CString};

#[repr(C)]
pub struct PgMagic {
    len: c_int,
    version: c_int,
    funcmaxargs: c_int,
    indexmaxkeys: c_int,
    namedatalen: c_int,
    float8byval: c_int,
    abi_extra: [u8; 32],
}

const fn abi_extra() -> [u8; 32] {
    let mut a = [0u8; 32];
    let s = b"PostgreSQL";
    let mut i = 0;
    while i < s.len() {
        a[i] = s[i];
        i += 1;
    }
    a
}

static MAGIC: PgMagic = PgMagic {
    len: std::mem::size_of::<PgMagic>() as c_int,
    version: 1500, // PostgreSQL 15
    funcmaxargs: 100,
    indexmaxkeys: 32,
    namedatalen: 64,
    float8byval: 1,
    abi_extra: abi_extra(),
};

#[no_mangle]
pub extern "C" fn Pg_magic_func() -> &'static PgMagic {
    &MAGIC
}

#[repr(C)]
pub struct PgFinfo {
    api_version: c_int,
}
static FINFO_V1: PgFinfo = PgFinfo { api_version: 1 };

#[no_mangle]
pub extern "C" fn pg_finfo_refresh_stream_table_wrapper() -> &'static PgFinfo {
    &FINFO_V1
}

extern "C" {
    fn SPI_connect() -> c_int;
    fn SPI_finish() -> c_int;
    fn SPI_execute(src: *const c_char, read_only: bool, tcount: c_long) -> c_int;
    static SPI_processed: u64;
}

mod spi {
    use super::*;
    /// Runs one statement through SPI; returns the number of rows processed. Inlined, so that
    /// each phase calls SPI_execute itself: a phase that only tail-calls a helper (`jmp`) is
    /// closed at the jump and its helper's time goes to the caller (docs/user-guide.md).
    #[inline(always)]
    pub fn run(sql: &str, read_only: bool) -> u64 {
        let c = CString::new(sql).expect("no NUL in SQL");
        let rc = unsafe { SPI_execute(c.as_ptr(), read_only, 0) };
        assert!(rc > 0, "SPI_execute failed: {rc}");
        unsafe { SPI_processed }
    }
}

pub mod cdc {
    #[inline(never)]
    pub fn count_pending_changes() -> u64 {
        super::spi::run("SELECT 1 FROM changes", true)
    }
}

pub mod refresh {
    #[derive(Debug, PartialEq)]
    pub enum Action {
        NoData,
        Differential(u64),
    }

    #[inline(never)]
    pub fn determine_refresh_action(cycle: i32, pending: u64) -> Action {
        if cycle % 50 == 0 {
            panic!("refreshx: simulated error in cycle {cycle}");
        }
        if pending == 0 {
            Action::NoData
        } else {
            Action::Differential(pending)
        }
    }

    pub mod merge {
        #[inline(never)]
        pub fn execute_differential_refresh(sql: &str) -> u64 {
            super::super::spi::run(sql, false)
        }
    }

    #[inline(never)]
    pub fn drain_pending_cleanups() -> u64 {
        super::spi::run("DELETE FROM changes", false)
    }
}

pub mod dvm {
    #[inline(never)]
    pub fn generate_delta_query(pending: u64) -> String {
        // The real one walks an operator tree; this one only builds the text.
        let mut q = String::with_capacity(256);
        q.push_str("SELECT DISTINCT ON (id) id, v FROM changes");
        q.push_str(" ORDER BY id, v DESC");
        if pending > 1_000_000 {
            q.push_str(" LIMIT 1000000");
        }
        q
    }
}

pub mod codegen {
    #[inline(never)]
    pub fn build_merge_sql(delta: &str) -> String {
        format!(
            "MERGE INTO st USING ({delta}) AS d ON st.id = d.id \
             WHEN MATCHED THEN UPDATE SET v = d.v \
             WHEN NOT MATCHED THEN INSERT (id, v) VALUES (d.id, d.v)"
        )
    }
}

#[inline(never)]
fn refresh_stream_table(cycle: i32) -> i64 {
    let pending = cdc::count_pending_changes();
    match refresh::determine_refresh_action(cycle, pending) {
        refresh::Action::NoData => 0,
        refresh::Action::Differential(n) => {
            let delta = dvm::generate_delta_query(n);
            let sql = codegen::build_merge_sql(&delta);
            let merged = refresh::merge::execute_differential_refresh(&sql);
            refresh::drain_pending_cleanups();
            merged as i64
        }
    }
}

/// The layout of FunctionCallInfoBaseData up to its first argument (PostgreSQL 15, x86-64).
#[repr(C)]
pub struct FcInfo {
    flinfo: *mut c_void,
    context: *mut c_void,
    resultinfo: *mut c_void,
    fncollation: u32,
    isnull: bool,
    nargs: i16,
    arg0: usize,
    arg0_isnull: bool,
}

#[no_mangle]
pub extern "C" fn refresh_stream_table_wrapper(fcinfo: *mut FcInfo) -> usize {
    let cycle = unsafe { (*fcinfo).arg0 as i32 };
    unsafe { SPI_connect() };
    let r = std::panic::catch_unwind(|| refresh_stream_table(cycle)).unwrap_or(-1);
    unsafe { SPI_finish() };
    r as usize // int8 is passed by value
}
