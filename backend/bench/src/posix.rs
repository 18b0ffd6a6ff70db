//! Workloads on a plain directory: the local filesystem or a FUSE mount (same code for both).

use crate::{drop_kernel_caches, emit, small_dirs, small_file, SmallArgs};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Run `f(thread, file_index)` for every file on `threads` threads; returns the wall time.
fn phase(
    threads: usize,
    files: usize,
    f: impl Fn(usize, usize) -> Result<()> + Sync,
) -> Result<f64> {
    let per = files.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                s.spawn(move || -> Result<()> {
                    for i in 0..per.min(files.saturating_sub(t * per)) {
                        f(t, i)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| anyhow::anyhow!("worker thread panicked"))??;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(start.elapsed().as_secs_f64())
}

/// A `mount.cairn` mount's request counters (`fuse.OP` / `brick.OP` → count), read from
/// the virtual xattr of its root; None on any other file system.
fn mount_stats(dir: &Path) -> Option<BTreeMap<String, u64>> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let name = c"trusted.cairn.mount-stats";
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: valid C strings and a buffer of the length passed.
    let n =
        unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    let text = String::from_utf8_lossy(&buf).into_owned();
    Some(
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
            .collect(),
    )
}

/// Requests per file between two [`mount_stats`] snapshots, as JSON (`{}` if none).
fn per_op(before: &Option<BTreeMap<String, u64>>, dir: &Path, files: usize) -> serde_json::Value {
    let (Some(b), Some(a)) = (before, mount_stats(dir)) else { return json!({}) };
    let mut fuse = serde_json::Map::new();
    let mut brick = serde_json::Map::new();
    let mut client = serde_json::Map::new();
    for (k, v) in &a {
        let d = v - b.get(k).copied().unwrap_or(0);
        if d == 0 {
            continue;
        }
        let per = json!((d as f64 / files as f64 * 100.0).round() / 100.0);
        if let Some(op) = k.strip_prefix("fuse.") {
            fuse.insert(op.to_string(), per);
        } else if k == "brick.round_trips" {
            continue;
        } else if let Some(op) = k.strip_prefix("brick.") {
            brick.insert(op.to_string(), per);
        } else if let Some(what) = k.strip_prefix("client.") {
            client.insert(what.to_string(), per);
        }
    }
    let rt = a.get("brick.round_trips").copied().unwrap_or(0)
        - b.get("brick.round_trips").copied().unwrap_or(0);
    json!({"fuse_per_op": fuse, "brick_per_op": brick, "client_per_op": client,
        "rt_per_op": rt as f64 / files as f64})
}

pub fn smallfiles(dir: &Path, target: &str, a: &SmallArgs) -> Result<()> {
    let threads = a.threads.max(1);
    let per = a.files.div_ceil(threads);
    let files = per * threads;
    let path = |t: usize, i: usize| -> PathBuf {
        let (d, name) = small_file(i);
        let mut p = dir.to_path_buf();
        for c in &small_dirs(t)[d] {
            p.push(c);
        }
        p.push(name);
        p
    };
    if dir.join("sf").exists() {
        fs::remove_dir_all(dir.join("sf"))
            .with_context(|| format!("removing an old {}/sf", dir.display()))?;
    }
    for t in 0..threads {
        for d in small_dirs(t) {
            let p: PathBuf = d.iter().fold(dir.to_path_buf(), |p, c| p.join(c));
            fs::create_dir_all(&p).with_context(|| format!("mkdir -p {}", p.display()))?;
        }
    }
    let data = vec![0x5au8; a.size];
    let extra = |cold: bool, before: &Option<BTreeMap<String, u64>>| {
        let mut o = json!({"files": files, "threads": threads, "size": a.size, "cold": cold});
        if let (Some(m), serde_json::Value::Object(x)) =
            (o.as_object_mut(), per_op(before, dir, files))
        {
            m.extend(x);
        }
        o
    };

    let cold = drop_kernel_caches();
    let before = mount_stats(dir);
    let secs = phase(threads, files, |t, i| {
        let p = path(t, i);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .with_context(|| format!("create {}", p.display()))?;
        f.write_all(&data).with_context(|| format!("write {}", p.display()))?;
        Ok(())
    })?;
    emit("create", target, files as f64 / secs, "files/s", extra(cold, &before));

    let cold = drop_kernel_caches();
    let before = mount_stats(dir);
    let secs = phase(threads, files, |t, i| {
        let p = path(t, i);
        let mut buf = Vec::with_capacity(a.size + 1);
        File::open(&p)
            .and_then(|mut f| f.read_to_end(&mut buf))
            .with_context(|| format!("read {}", p.display()))?;
        if buf.len() != a.size {
            bail!("read {}: got {} bytes, wrote {}", p.display(), buf.len(), a.size);
        }
        Ok(())
    })?;
    emit("read", target, files as f64 / secs, "files/s", extra(cold, &before));

    let cold = drop_kernel_caches();
    let before = mount_stats(dir);
    let secs = phase(threads, files, |t, i| {
        let p = path(t, i);
        let m = fs::metadata(&p).with_context(|| format!("stat {}", p.display()))?;
        if m.len() != a.size as u64 {
            bail!("stat {}: size {} expected {}", p.display(), m.len(), a.size);
        }
        Ok(())
    })?;
    emit("stat", target, files as f64 / secs, "files/s", extra(cold, &before));

    let cold = drop_kernel_caches();
    let before = mount_stats(dir);
    let secs = phase(threads, files, |t, i| {
        let p = path(t, i);
        fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))
    })?;
    emit("delete", target, files as f64 / secs, "files/s", extra(cold, &before));
    fs::remove_dir_all(dir.join("sf")).with_context(|| format!("removing {}/sf", dir.display()))?;
    Ok(())
}

pub fn append(file: &Path, target: &str, count: usize, size: usize) -> Result<()> {
    let _ = fs::remove_file(file);
    let mut line = vec![b'x'; size];
    if let Some(l) = line.last_mut() {
        *l = b'\n';
    }
    let start = Instant::now();
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(file)
        .with_context(|| format!("open O_APPEND {}", file.display()))?;
    for i in 0..count {
        f.write_all(&line).with_context(|| format!("append #{i} to {}", file.display()))?;
    }
    // close(2): the FUSE client flushes its write-behind here; errors surface.
    drop(f);
    let secs = start.elapsed().as_secs_f64();
    let len = fs::metadata(file).with_context(|| format!("stat {}", file.display()))?.len();
    if len != (count * size) as u64 {
        bail!("{}: size {len} after {count} appends of {size} bytes", file.display());
    }
    emit("append", target, secs, "s", json!({"count": count, "size": size}));
    fs::remove_file(file).with_context(|| format!("unlink {}", file.display()))?;
    Ok(())
}

/// Sequential write of `mib` MiB in `record`-sized write(2)s, fsync, close (timed
/// together); then drop the kernel caches and read it back in `record`-sized read(2)s.
/// The file stays for the random-I/O run (fio).
pub fn seq(file: &Path, target: &str, mib: u64, record: usize) -> Result<()> {
    let _ = fs::remove_file(file);
    let total = mib << 20;
    let n = total.div_ceil(record as u64);
    let data = vec![0xa5u8; record];
    let start = Instant::now();
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
        .with_context(|| format!("create {}", file.display()))?;
    for i in 0..n {
        f.write_all(&data)
            .with_context(|| format!("write {} at {}", file.display(), i * record as u64))?;
    }
    f.sync_all().with_context(|| format!("fsync {}", file.display()))?;
    drop(f);
    let secs = start.elapsed().as_secs_f64();
    let bytes = n * record as u64;
    emit(
        "seq_write",
        target,
        bytes as f64 / secs / 1048576.0,
        "MiB/s",
        json!({"bytes": bytes, "record": record, "fsync": true}),
    );

    let cold = drop_kernel_caches();
    let mut buf = vec![0u8; record];
    let start = Instant::now();
    let mut f = File::open(file).with_context(|| format!("open {}", file.display()))?;
    let mut got = 0u64;
    loop {
        let k = f.read(&mut buf).with_context(|| format!("read {} at {got}", file.display()))?;
        if k == 0 {
            break;
        }
        got += k as u64;
    }
    drop(f);
    let secs = start.elapsed().as_secs_f64();
    if got != bytes {
        bail!("{}: read {got} bytes, wrote {bytes}", file.display());
    }
    emit(
        "seq_read",
        target,
        got as f64 / secs / 1048576.0,
        "MiB/s",
        json!({"bytes": got, "record": record, "cold": cold}),
    );
    Ok(())
}
