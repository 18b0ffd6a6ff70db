//! `cairn-bench`: the workloads of `tests/bench/run.sh` that fio does not cover.
//!
//! - `posix-smallfiles`, `posix-append`: run on any directory (the local filesystem or a
//!   FUSE mount), so local and FUSE numbers come from the same code.
//! - `lib-seq`, `lib-rand`, `lib-smallfiles`, `lib-append`: the same workloads through the
//!   Rust client API (`cairn-client`, what `libcairn` wraps), reporting backend round trips
//!   per operation from `Volume::stats()`.
//! - `rtt`: the deterministic round-trip checks (create on a 1-set vs a 4-set volume, cold
//!   and warm resolve of a 4-deep path), reported PASS/FAIL.
//!
//! Every result is one JSON object per line on stdout:
//! `{"op": .., "target": .., "value": .., "unit": .., ...}`; `run.sh` collects them and
//! `report.py` prints the table. Progress and errors go to stderr.

mod lib_ops;
mod posix;
mod rtt;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Cairn benchmark workloads (driven by tests/bench/run.sh)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
pub struct VolArgs {
    /// `host:port` of a cairnd.
    #[arg(long)]
    pub server: String,
    /// Volume name.
    #[arg(long)]
    pub volume: String,
    /// Label for the results (e.g. `lib-2x2`).
    #[arg(long)]
    pub target: String,
}

#[derive(clap::Args, Clone)]
pub struct SmallArgs {
    /// Number of files (split over the threads).
    #[arg(long, default_value_t = 5000)]
    pub files: usize,
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Bytes written to / read from each file.
    #[arg(long, default_value_t = 4096)]
    pub size: usize,
}

#[derive(Subcommand)]
enum Cmd {
    /// Small files create/read/stat/delete under DIR (4-level paths, N threads).
    PosixSmallfiles {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        target: String,
        #[command(flatten)]
        small: SmallArgs,
    },
    /// Sequential write (1 MiB write(2)s, fsync, close) and cold read of FILE.
    PosixSeq {
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        target: String,
        #[arg(long, default_value_t = 1024)]
        mib: u64,
        #[arg(long, default_value_t = 1 << 20)]
        record: usize,
    },
    /// COUNT appends of SIZE bytes to one file opened O_APPEND, then close.
    PosixAppend {
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        target: String,
        #[arg(long, default_value_t = 1_000_000)]
        count: usize,
        #[arg(long, default_value_t = 40)]
        size: usize,
    },
    /// Sequential write (then fsync) and read of one file in RECORD-sized requests.
    LibSeq {
        #[command(flatten)]
        vol: VolArgs,
        #[arg(long, default_value_t = 1024)]
        mib: u64,
        #[arg(long, default_value_t = 1 << 20)]
        record: usize,
        /// Reads kept in flight (like the kernel's readahead for the FUSE mount).
        #[arg(long, default_value_t = 4)]
        read_depth: usize,
    },
    /// 4 KiB random reads, then random writes (ending with fsync), at queue depth QD on the
    /// file left by lib-seq.
    LibRand {
        #[command(flatten)]
        vol: VolArgs,
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        #[arg(long, default_value_t = 16)]
        qd: usize,
    },
    LibSmallfiles {
        #[command(flatten)]
        vol: VolArgs,
        #[command(flatten)]
        small: SmallArgs,
    },
    LibAppend {
        #[command(flatten)]
        vol: VolArgs,
        #[arg(long, default_value_t = 1_000_000)]
        count: usize,
        #[arg(long, default_value_t = 40)]
        size: usize,
    },
    /// Round-trip checks; exits 1 if one fails.
    Rtt {
        #[arg(long)]
        server: String,
        /// A volume of one replica set.
        #[arg(long)]
        one_set: String,
        /// A volume of four replica sets.
        #[arg(long)]
        four_sets: String,
        /// Further volumes to measure (e.g. the 2 x 2 one).
        #[arg(long)]
        also: Vec<String>,
    },
}

/// Print one result line.
pub fn emit(op: &str, target: &str, value: f64, unit: &str, extra: serde_json::Value) {
    let mut o = serde_json::json!({"op": op, "target": target, "value": value, "unit": unit});
    if let (Some(m), serde_json::Value::Object(x)) = (o.as_object_mut(), extra) {
        m.extend(x);
    }
    println!("{o}");
}

/// Write back dirty pages and drop the kernel's page, dentry and inode caches (root only);
/// returns whether it worked, which the results record.
pub fn drop_kernel_caches() -> bool {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CAIRN_BENCH_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::PosixSmallfiles { dir, target, small } => posix::smallfiles(&dir, &target, &small)
            .with_context(|| format!("small files under {}", dir.display())),
        Cmd::PosixSeq { file, target, mib, record } => posix::seq(&file, &target, mib, record)
            .with_context(|| format!("sequential I/O on {}", file.display())),
        Cmd::PosixAppend { file, target, count, size } => {
            posix::append(&file, &target, count, size)
                .with_context(|| format!("appends to {}", file.display()))
        }
        Cmd::Rtt { server, one_set, four_sets, also } => {
            let ok = runtime()?.block_on(rtt::run(&server, &one_set, &four_sets, &also))?;
            if !ok {
                eprintln!("cairn-bench: a round-trip check failed");
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::LibSeq { vol, mib, record, read_depth } => {
            runtime()?.block_on(lib_ops::seq(&vol, mib, record, read_depth))
        }
        Cmd::LibRand { vol, seconds, qd } => runtime()?.block_on(lib_ops::rand(&vol, seconds, qd)),
        Cmd::LibSmallfiles { vol, small } => runtime()?.block_on(lib_ops::smallfiles(&vol, &small)),
        Cmd::LibAppend { vol, count, size } => {
            runtime()?.block_on(lib_ops::append(&vol, count, size))
        }
    }
}

/// The same runtime shape as mount-cairn's (4 worker threads).
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

/// The small-file layout shared by the POSIX and the client-API runs: file `i` of thread
/// `t` lives at `sf/t<t>/a<i%4>/b<i/4%4>/f<i>` (4 directory levels, 16 leaf directories per
/// thread).
pub fn small_dirs(t: usize) -> Vec<[String; 4]> {
    let mut v = vec![];
    for a in 0..4 {
        for b in 0..4 {
            v.push(["sf".to_string(), format!("t{t}"), format!("a{a}"), format!("b{b}")]);
        }
    }
    v
}

/// Index into `small_dirs(t)` and file name of file `i`.
pub fn small_file(i: usize) -> (usize, String) {
    ((i % 4) * 4 + (i / 4) % 4, format!("f{i}"))
}
