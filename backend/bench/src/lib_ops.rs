//! The workloads through the client API (`cairn-client`, the Rust side of libcairn).

use crate::{drop_kernel_caches, emit, small_dirs, small_file, SmallArgs, VolArgs};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use cairn_client::{Creds, Errno, Id, MountOptions, Volume};
use futures::StreamExt;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const SEQ_FILE: &[u8] = b"seq.lib";

pub async fn mount(server: &str, volume: &str) -> Result<Arc<Volume>> {
    let opts = MountOptions {
        servers: vec![server.to_string()],
        volume: volume.to_string(),
        client_name: "cairn-bench".into(),
        ..MountOptions::default()
    };
    Volume::mount(opts).await.map_err(|e| anyhow::anyhow!("mount {volume} via {server}: {e}"))
}

/// Backend round trips so far.
pub fn rts(v: &Volume) -> u64 {
    v.stats().round_trips
}

/// `mkdir -p` of `comps` under the root; returns the last directory's id.
pub async fn mkdir_p(v: &Volume, comps: &[impl AsRef<[u8]>]) -> Result<Id> {
    let c = Creds::root();
    let mut cur = Id::ROOT;
    for comp in comps {
        let name = comp.as_ref();
        let what = || format!("{}: mkdir {}", v.map().name, String::from_utf8_lossy(name));
        cur = match v.mkdir(&c, cur, name, 0o755).await {
            Ok(a) => a.id,
            Err(e) if e.errno == Errno::EEXIST => {
                v.lookup(&c, cur, name).await.map_err(|e| anyhow::anyhow!("{}: {e}", what()))?.id
            }
            Err(e) => bail!("{}: {e}", what()),
        };
    }
    Ok(cur)
}

/// Remove `name` in `dir` if it exists.
async fn remove_if_there(v: &Volume, dir: Id, name: &[u8]) -> Result<()> {
    match v.unlink(&Creds::root(), dir, name).await {
        Ok(()) => Ok(()),
        Err(e) if e.errno == Errno::ENOENT => Ok(()),
        Err(e) => bail!("{}: unlink {}: {e}", v.map().name, String::from_utf8_lossy(name)),
    }
}

fn ctx(v: &Volume, what: impl std::fmt::Display, e: cairn_client::RemoteError) -> anyhow::Error {
    anyhow::anyhow!("{}: {what}: {e}", v.map().name)
}

pub async fn seq(a: &VolArgs, mib: u64, record: usize, read_depth: usize) -> Result<()> {
    let v = mount(&a.server, &a.volume).await?;
    let c = Creds::root();
    remove_if_there(&v, Id::ROOT, SEQ_FILE).await?;
    let total = mib << 20;
    let n = total.div_ceil(record as u64);
    let data = Bytes::from(vec![0xa5u8; record]);

    let rt0 = rts(&v);
    let start = Instant::now();
    let id = v
        .create(&c, Id::ROOT, SEQ_FILE, 0o644, true)
        .await
        .map_err(|e| ctx(&v, "create seq.lib", e))?
        .id;
    v.open(&c, id).await.map_err(|e| ctx(&v, "open seq.lib", e))?;
    for i in 0..n {
        v.write(&c, id, i * record as u64, data.clone())
            .await
            .map_err(|e| ctx(&v, format_args!("write seq.lib at {}", i * record as u64), e))?;
    }
    v.fsync(&c, id, false).await.map_err(|e| ctx(&v, "fsync seq.lib", e))?;
    v.release(id).await.map_err(|e| ctx(&v, "release seq.lib", e))?;
    let secs = start.elapsed().as_secs_f64();
    let rt = rts(&v) - rt0;
    emit(
        "seq_write",
        &a.target,
        (n * record as u64) as f64 / secs / 1048576.0,
        "MiB/s",
        json!({"bytes": n * record as u64, "record": record, "rt_per_op": rt as f64 / n as f64, "fsync": true}),
    );

    let cold = drop_kernel_caches();
    v.drop_caches();
    let rt0 = rts(&v);
    let start = Instant::now();
    let vv = v.clone();
    let mut reads = futures::stream::iter(0..n)
        .map(|i| {
            let v = vv.clone();
            let c = c.clone();
            async move { (i, v.read(&c, id, i * record as u64, record as u32).await) }
        })
        .buffered(read_depth.max(1));
    let mut got = 0u64;
    while let Some((i, r)) = reads.next().await {
        let (d, _) =
            r.map_err(|e| ctx(&v, format_args!("read seq.lib at {}", i * record as u64), e))?;
        got += d.len() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    if got != n * record as u64 {
        bail!("{}: read {got} bytes of seq.lib, wrote {}", a.volume, n * record as u64);
    }
    let rt = rts(&v) - rt0;
    emit(
        "seq_read",
        &a.target,
        got as f64 / secs / 1048576.0,
        "MiB/s",
        json!({"bytes": got, "record": record, "rt_per_op": rt as f64 / n as f64, "cold": cold, "depth": read_depth}),
    );
    v.unmount().await.map_err(|e| ctx(&v, "unmount", e))?;
    Ok(())
}

pub async fn rand(a: &VolArgs, seconds: u64, qd: usize) -> Result<()> {
    let v = mount(&a.server, &a.volume).await?;
    let c = Creds::root();
    let attr = v
        .lookup(&c, Id::ROOT, SEQ_FILE)
        .await
        .map_err(|e| ctx(&v, "lookup seq.lib (run lib-seq first)", e))?;
    let blocks = attr.size / 4096;
    if blocks == 0 {
        bail!("{}: seq.lib is empty", a.volume);
    }
    let id = attr.id;
    v.open(&c, id).await.map_err(|e| ctx(&v, "open seq.lib", e))?;
    for write in [false, true] {
        let op = if write { "rand_write" } else { "rand_read" };
        drop_kernel_caches();
        let done = Arc::new(AtomicU64::new(0));
        let rt0 = rts(&v);
        let start = Instant::now();
        let deadline = start + Duration::from_secs(seconds);
        let tasks: Vec<_> = (0..qd)
            .map(|t| {
                let (v, c, done) = (v.clone(), c.clone(), done.clone());
                tokio::spawn(async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64 + 1);
                    let data = Bytes::from(vec![t as u8; 4096]);
                    while Instant::now() < deadline {
                        let off = rng.gen_range(0..blocks) * 4096;
                        if write {
                            v.write(&c, id, off, data.clone())
                                .await
                                .map_err(|e| anyhow::anyhow!("write seq.lib at {off}: {e}"))?;
                        } else {
                            let (d, _) = v
                                .read(&c, id, off, 4096)
                                .await
                                .map_err(|e| anyhow::anyhow!("read seq.lib at {off}: {e}"))?;
                            if d.len() != 4096 {
                                bail!("read seq.lib at {off}: {} bytes", d.len());
                            }
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        for t in tasks {
            t.await.context("random I/O task")?.with_context(|| format!("volume {}", a.volume))?;
        }
        if write {
            // Like fio's end_fsync: everything acknowledged is on the bricks.
            v.fsync(&c, id, false).await.map_err(|e| ctx(&v, "fsync seq.lib", e))?;
        }
        let secs = start.elapsed().as_secs_f64();
        let n = done.load(Ordering::Relaxed);
        let rt = rts(&v) - rt0;
        emit(
            op,
            &a.target,
            n as f64 / secs,
            "IOPS",
            json!({"qd": qd, "seconds": secs, "rt_per_op": rt as f64 / n.max(1) as f64}),
        );
    }
    v.release(id).await.map_err(|e| ctx(&v, "release seq.lib", e))?;
    remove_if_there(&v, Id::ROOT, SEQ_FILE).await?;
    v.unmount().await.map_err(|e| ctx(&v, "unmount", e))?;
    Ok(())
}

pub async fn smallfiles(a: &VolArgs, s: &SmallArgs) -> Result<()> {
    let v = mount(&a.server, &a.volume).await?;
    let threads = s.threads.max(1);
    let per = s.files.div_ceil(threads);
    let files = per * threads;
    // The leaf directories' handles, as an application (or Ganesha) would hold them.
    let mut dirs: Vec<Vec<Id>> = vec![];
    for t in 0..threads {
        let mut ids = vec![];
        for d in small_dirs(t) {
            ids.push(mkdir_p(&v, &d).await?);
        }
        dirs.push(ids);
    }
    let dirs = Arc::new(dirs);
    let data = Bytes::from(vec![0x5au8; s.size]);
    let size = s.size;
    for op in ["create", "read", "stat", "delete"] {
        let cold = drop_kernel_caches();
        v.drop_caches();
        let rt0 = rts(&v);
        let start = Instant::now();
        let tasks: Vec<_> = (0..threads)
            .map(|t| {
                let (v, dirs, data) = (v.clone(), dirs.clone(), data.clone());
                tokio::spawn(async move {
                    let c = Creds::root();
                    for i in 0..per {
                        let (d, name) = small_file(i);
                        let dir = dirs[t][d];
                        let what = format!("t{t}/{name}");
                        let e = |e| anyhow::anyhow!("{op} {what}: {e}");
                        match op {
                            "create" => {
                                let id = v
                                    .create(&c, dir, name.as_bytes(), 0o644, true)
                                    .await
                                    .map_err(e)?
                                    .id;
                                v.open(&c, id).await.map_err(e)?;
                                v.write(&c, id, 0, data.clone()).await.map_err(e)?;
                                v.release(id).await.map_err(e)?;
                            }
                            "read" => {
                                let id = v.lookup(&c, dir, name.as_bytes()).await.map_err(e)?.id;
                                v.open(&c, id).await.map_err(e)?;
                                let (b, _) = v.read(&c, id, 0, size as u32 + 1).await.map_err(e)?;
                                v.release(id).await.map_err(e)?;
                                if b.len() != size {
                                    bail!("read {what}: {} bytes, wrote {size}", b.len());
                                }
                            }
                            "stat" => {
                                let at = v.lookup(&c, dir, name.as_bytes()).await.map_err(e)?;
                                let at = v.getattr(&c, at.id).await.map_err(e)?;
                                if at.size != size as u64 {
                                    bail!("stat {what}: size {} expected {size}", at.size);
                                }
                            }
                            _ => v.unlink(&c, dir, name.as_bytes()).await.map_err(e)?,
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for t in tasks {
            t.await.context("small-file task")?.with_context(|| format!("volume {}", a.volume))?;
        }
        let secs = start.elapsed().as_secs_f64();
        let rt = rts(&v) - rt0;
        emit(
            op,
            &a.target,
            files as f64 / secs,
            "files/s",
            json!({"files": files, "threads": threads, "size": size, "cold": cold, "rt_per_op": rt as f64 / files as f64}),
        );
    }
    v.unmount().await.map_err(|e| ctx(&v, "unmount", e))?;
    Ok(())
}

pub async fn append(a: &VolArgs, count: usize, size: usize) -> Result<()> {
    let v = mount(&a.server, &a.volume).await?;
    let c = Creds::root();
    let name: &[u8] = b"append.lib";
    remove_if_there(&v, Id::ROOT, name).await?;
    let mut line = vec![b'x'; size];
    if let Some(l) = line.last_mut() {
        *l = b'\n';
    }
    let line = Bytes::from(line);
    let rt0 = rts(&v);
    let start = Instant::now();
    let id = v
        .create(&c, Id::ROOT, name, 0o644, true)
        .await
        .map_err(|e| ctx(&v, "create append.lib", e))?
        .id;
    v.open(&c, id).await.map_err(|e| ctx(&v, "open append.lib", e))?;
    for i in 0..count {
        v.write(&c, id, (i * size) as u64, line.clone())
            .await
            .map_err(|e| ctx(&v, format_args!("append #{i}"), e))?;
    }
    v.release(id).await.map_err(|e| ctx(&v, "release append.lib", e))?;
    let secs = start.elapsed().as_secs_f64();
    let rt = rts(&v) - rt0;
    let got = v.getattr(&c, id).await.map_err(|e| ctx(&v, "getattr append.lib", e))?.size;
    if got != (count * size) as u64 {
        bail!("{}: append.lib has {got} bytes after {count} appends of {size}", a.volume);
    }
    emit("append", &a.target, secs, "s", json!({"count": count, "size": size, "round_trips": rt}));
    remove_if_there(&v, Id::ROOT, name).await?;
    v.unmount().await.map_err(|e| ctx(&v, "unmount", e))?;
    Ok(())
}
