//! Builds the eBPF programs in probes/ebpf for the BPF target and leaves the object in OUT_DIR,
//! where src/attach embeds it with `include_bytes_aligned!`.
fn main() -> anyhow::Result<()> {
    // The toolchain is named explicitly: `Toolchain::default()` runs whatever `nightly` is
    // installed, which may lack rust-src or be too old for aya (see facts in the docs).
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "wprof-ebpf",
            root_dir: "probes/ebpf",
            ..Default::default()
        }],
        aya_build::Toolchain::Custom("nightly-2026-10-29"),
    )
}
