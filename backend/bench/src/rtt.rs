//! Deterministic checks of backend round trips per operation (from `Volume::stats()`).
//!
//! - A create costs the same on a volume of 1 replica set and of 4 (no broadcast).
//! - Resolving a 4-deep path (`p1/p2/p3/p4/f`: four directories, then the file) and
//!   opening it costs at most 2 round trips cold (after `drop_caches`) and 0 warm.

use crate::emit;
use crate::lib_ops::{mkdir_p, mount, rts};
use anyhow::{bail, Result};
use cairn_client::{Creds, Errno, Volume};
use serde_json::json;
use std::collections::BTreeMap;

const CREATES: usize = 32;
const MAX_COLD_OPEN: u64 = 2;

/// Per-op round trips of one call: run `f`, diff the counters.
async fn measure<F, Fut, T>(v: &Volume, f: F) -> Result<(u64, String)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let before: BTreeMap<&str, u64> = v.stats().by_op.into_iter().collect();
    let r0 = rts(v);
    f().await?;
    let n = rts(v) - r0;
    let detail: Vec<String> = v
        .stats()
        .by_op
        .into_iter()
        .filter_map(|(op, c)| {
            let d = c - before.get(op).copied().unwrap_or(0);
            (d > 0).then(|| format!("{op} {d}"))
        })
        .collect();
    Ok((n, detail.join(", ")))
}

struct VolResult {
    /// Distinct round-trip counts seen for a create (should be one value).
    create: BTreeMap<u64, usize>,
    create_ops: String,
    mkdir: u64,
    cold: u64,
    cold_ops: String,
    warm: u64,
    sets: usize,
}

async fn on_volume(server: &str, volume: &str) -> Result<VolResult> {
    let v = mount(server, volume).await?;
    let c = Creds::root();
    let sets = v.map().sets.len();
    let dir = mkdir_p(&v, &["rtt", "c"]).await?;
    let mut create = BTreeMap::new();
    let mut create_ops = String::new();
    for i in 0..CREATES {
        let name = format!("f{i}");
        let (n, ops) = measure(&v, || async {
            v.create(&c, dir, name.as_bytes(), 0o644, true)
                .await
                .map_err(|e| anyhow::anyhow!("{volume}: create rtt/c/{name}: {e}"))
        })
        .await?;
        *create.entry(n).or_insert(0) += 1;
        create_ops = ops;
    }
    let parent = mkdir_p(&v, &["rtt"]).await?;
    let (mkdir, _) = measure(&v, || async {
        match v.mkdir(&c, parent, b"m", 0o755).await {
            Ok(_) => Ok(()),
            Err(e) if e.errno == Errno::EEXIST => Ok(()),
            Err(e) => Err(anyhow::anyhow!("{volume}: mkdir rtt/m: {e}")),
        }
    })
    .await?;

    let leaf = mkdir_p(&v, &["p1", "p2", "p3", "p4"]).await?;
    match v.create(&c, leaf, b"f", 0o644, true).await {
        Ok(_) => {}
        Err(e) if e.errno == Errno::EEXIST => {}
        Err(e) => bail!("{volume}: create p1/p2/p3/p4/f: {e}"),
    }
    let open = || async {
        let a = v
            .resolve(&c, b"p1/p2/p3/p4/f")
            .await
            .map_err(|e| anyhow::anyhow!("{volume}: resolve p1/p2/p3/p4/f: {e}"))?;
        v.open(&c, a.id).await.map_err(|e| anyhow::anyhow!("{volume}: open p1/p2/p3/p4/f: {e}"))?;
        v.release(a.id).await.map_err(|e| anyhow::anyhow!("{volume}: release p1/p2/p3/p4/f: {e}"))
    };
    v.drop_caches();
    let (cold, cold_ops) = measure(&v, open).await?;
    let (warm, _) = measure(&v, open).await?;
    v.unmount().await.map_err(|e| anyhow::anyhow!("{volume}: unmount: {e}"))?;
    Ok(VolResult { create, create_ops, mkdir, cold, cold_ops, warm, sets })
}

fn fmt_counts(m: &BTreeMap<u64, usize>) -> String {
    m.iter().map(|(rt, n)| format!("{rt} ({n}x)")).collect::<Vec<_>>().join(" / ")
}

pub async fn run(server: &str, one: &str, four: &str, also: &[String]) -> Result<bool> {
    let mut ok = true;
    let r1 = on_volume(server, one).await?;
    let r4 = on_volume(server, four).await?;
    if r1.sets != 1 || r4.sets != 4 {
        bail!("rtt: {one} has {} replica sets (want 1), {four} has {} (want 4)", r1.sets, r4.sets);
    }
    // A create: one count, the same on both volumes.
    let same = r1.create.len() == 1
        && r4.create.len() == 1
        && r1.create.keys().next() == r4.create.keys().next();
    ok &= same;
    let per = r4.create.keys().next().copied().unwrap_or(0);
    emit(
        "rt_create",
        "check",
        per as f64,
        "round trips",
        json!({"pass": same, "detail": format!("1 set: {}; 4 sets: {} [{}]", fmt_counts(&r1.create), fmt_counts(&r4.create), r4.create_ops)}),
    );
    let mut vols = vec![(one.to_string(), r1), (four.to_string(), r4)];
    for a in also {
        vols.push((a.clone(), on_volume(server, a).await?));
    }
    for (name, r) in &vols {
        let cold_ok = r.cold <= MAX_COLD_OPEN;
        let warm_ok = r.warm == 0;
        ok &= cold_ok && warm_ok;
        emit(
            "rt_open_cold",
            "check",
            r.cold as f64,
            "round trips",
            json!({"pass": cold_ok, "volume": name, "sets": r.sets, "detail": format!("{name} ({} sets): {} [{}]", r.sets, r.cold, r.cold_ops)}),
        );
        emit(
            "rt_open_warm",
            "check",
            r.warm as f64,
            "round trips",
            json!({"pass": warm_ok, "volume": name, "sets": r.sets, "detail": format!("{name} ({} sets): {}", r.sets, r.warm)}),
        );
        emit(
            "rt_mkdir",
            "info",
            r.mkdir as f64,
            "round trips",
            json!({"volume": name, "sets": r.sets, "detail": format!("{name} ({} sets): {}", r.sets, r.mkdir)}),
        );
    }
    Ok(ok)
}
