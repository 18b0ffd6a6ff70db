//! Fuzzing a live `cairnd` over its wire protocol: after a proper HELLO, a connection sends
//! mutated versions of real request frames (every brick op, on a scratch directory and
//! file this test made, as clients send them and as chain heads forward them, which a
//! non-member must not get applied; management calls that name only a scratch volume), several per
//! connection, pipelined and split across writes at random points. After each case:
//!
//! - every frame the daemon could read and decode got an answer, and the connection was
//!   closed within a bounded wait (the test half-closes its side, so a frame whose length
//!   claims more than was sent ends in EOF, not a wait);
//! - the daemon logged no panic and still answers a new connection;
//! - a separate well-behaved client (`cairn_client`) still reads the sentinel file;
//!
//! and at the end a fresh mount reads the sentinel file (written before the fuzzing,
//! outside the scratch directory, never named by a fuzzed request) back byte-identical.
//!
//! Cases: `PROPTEST_CASES` (default 100); the seed is printed and taken from
//! `PROPTEST_RNG_SEED` to replay a run (docs/wire-protocol.md, "Fuzzing").

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Id, Volume};
use cairn_proto::frame::{self, Frame, FrameKind};
use cairn_proto::msg::{BrickRequest, Op, ReplicateRequest, Request, Response};
use cairn_proto::testing::{self, frame_mutation_or_intact, mutate_frame, FrameMutation};
use cairn_proto::{rpc::Connection, PROTOCOL_VERSION};
use common::{connect_hello, Cluster};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How long a case's connection may take to answer and close.
const CASE_WAIT: Duration = Duration::from_secs(10);

/// Frames sent, frames the daemon could decode (and so had to answer), and of those the
/// answers that were not errors: printed at the end, to show how deep the cases reach.
static SENT: AtomicUsize = AtomicUsize::new(0);
static DECODED: AtomicUsize = AtomicUsize::new(0);
static OK: AtomicUsize = AtomicUsize::new(0);

const SENTINEL: &[u8] = b"sentinel: written before the fuzzing, never named by it\n";

struct Target {
    vol: Arc<Volume>,
    sentinel: Id,
    scratch: Id,
    file: Id,
    epoch: u64,
    /// Real requests with their data segments.
    templates: Vec<(Request, Vec<u8>)>,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

async fn setup(c: &Cluster) -> Target {
    c.volume("v", 1, &[&c.path("b1")]).await;
    c.volume("fuzzvol", 1, &[&c.path("fzb")]).await;
    let vol = c.mount("v").await.unwrap();
    let root = Creds::root();
    let s = vol.create(&root, Id::ROOT, b"sentinel", 0o644, true).await.unwrap();
    vol.write_through(&root, s.id, 0, Bytes::from_static(SENTINEL)).await.unwrap();
    vol.fsync(&root, s.id, false).await.unwrap();
    let scratch = vol.mkdir(&root, Id::ROOT, b"scratch", 0o777).await.unwrap();
    let file = vol.create(&root, scratch.id, b"file", 0o666, true).await.unwrap();
    vol.write_through(&root, file.id, 0, Bytes::from(vec![b'x'; 8192])).await.unwrap();
    let epoch = vol.map().epoch;
    let mut templates: Vec<(Request, Vec<u8>)> =
        cairn_proto::testing::sample_ops(scratch.id, file.id, "fz")
            .into_iter()
            .map(|(op, data)| {
                let req = BrickRequest {
                    volume: "v".into(),
                    brick: 0,
                    epoch,
                    creds: Creds::root(),
                    op,
                    req: None,
                    parents: true,
                    inline: 4096,
                    layout_epoch: None,
                    sync: false,
                    locks: false,
                };
                (Request::Brick(req), data)
            })
            .collect();
    templates.extend(
        cairn_proto::testing::sample_mgmt("fuzzvol")
            .into_iter()
            .map(|m| (Request::Mgmt(m), vec![])),
    );
    templates.extend([
        (Request::Ping, vec![]),
        (Request::GetMap { volume: "v".into() }, vec![]),
        (Request::Subscribe { volume: "v".into() }, vec![]),
        (Request::InvalidateAck { seq: 1 }, vec![]),
    ]);
    Target { vol, sentinel: s.id, scratch: scratch.id, file: file.id, epoch, templates }
}

/// What one frame of a case carries.
#[derive(Debug, Clone)]
enum Msg {
    /// One of the real requests.
    Template(usize),
    /// A generated op, any values in its fields, on the scratch directory and file (or an
    /// id that does not exist), with a data segment.
    Op(Op, Vec<u8>),
    /// The same, forwarded as by a chain head (`Replicate`; peers are not authenticated
    /// yet, so any client can send one), with the attributes it claims the head ended with.
    Replicate(Op, Vec<u8>, Option<cairn_proto::Attr>),
}

/// Ids the generated ops name: never the root directory or the sentinel.
fn scratch_ids(t: &Target) -> BoxedStrategy<Id> {
    let (d, f) = (t.scratch, t.file);
    prop_oneof![2 => Just(d), 3 => Just(f), 1 => any::<u128>().prop_map(|x| Id(x | 1 << 100))]
        .boxed()
}

fn msg(t: &Target) -> BoxedStrategy<Msg> {
    let name = prop_oneof![
        3 => "fz[a-e]{0,2}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..300),
    ];
    let name2 = name.clone();
    let client = prop_oneof![
        1 => (0..t.templates.len()).prop_map(Msg::Template),
        2 => (
            testing::op(scratch_ids(t), name.boxed()),
            prop::collection::vec(any::<u8>(), 0..5000)
        )
            .prop_map(|(op, data)| Msg::Op(op, data)),
    ];
    // Forged forwards: this connection is not a cluster member (it says `Cli`), so each
    // must be refused (docs/wire-protocol.md, "Access control"). Applied, one whose op
    // fails would mark the brick as having missed a mutation and stop it serving until
    // healed, and the sentinel would not stay readable.
    prop_oneof![
        3 => client,
        1 => (
            testing::op(scratch_ids(t), name2.boxed()),
            prop::collection::vec(any::<u8>(), 0..5000),
            prop::option::of(testing::attr(scratch_ids(t))),
        )
            .prop_map(|(op, data, result)| Msg::Replicate(op, data, result)),
    ]
    .boxed()
}

/// One case: `frames` (what, mutation) sent on one connection, cut at `cuts`.
async fn one_case(
    c: &Cluster,
    t: &Target,
    frames: &[(Msg, FrameMutation)],
    cuts: &[usize],
) -> Result<(), String> {
    let log_from = c.log().len();
    let mut stream = vec![];
    for (n, (what, m)) in frames.iter().enumerate() {
        let (req, data) = match what {
            Msg::Template(i) => t.templates[*i].clone(),
            Msg::Op(op, data) => {
                let req = BrickRequest {
                    volume: "v".into(),
                    brick: 0,
                    epoch: t.epoch,
                    creds: Creds::root(),
                    op: op.clone(),
                    req: None,
                    parents: n % 2 == 0,
                    inline: 0,
                    layout_epoch: None,
                    sync: false,
                    locks: false,
                };
                (Request::Brick(req), data.clone())
            }
            Msg::Replicate(op, data, result) => {
                let req = ReplicateRequest {
                    volume: "v".into(),
                    brick: 0,
                    epoch: t.epoch,
                    from_brick: 0,
                    creds: Creds::root(),
                    op: op.clone(),
                    result: result.clone(),
                    missed: vec![],
                    req: None,
                    confirm: n % 3 == 0,
                    applied: vec![],
                };
                (Request::Replicate(req), data.clone())
            }
        };
        let f =
            Frame::new(FrameKind::Request, 100 + n as u64, frame::encode(&req), Bytes::from(data));
        stream.extend(mutate_frame(&f, m));
    }
    // The frames the daemon must answer: those it can read and decode, up to the first it
    // cannot (after which it answers that one with an error, when it knows its id, and
    // closes).
    let mut expect = vec![];
    let mut rd = &stream[..];
    while let Ok(f) = frame::read_frame(&mut rd).await {
        if f.kind != FrameKind::Request || frame::decode::<Request>(&f.header).is_err() {
            break;
        }
        expect.push(f.id);
    }
    SENT.fetch_add(frames.len(), Relaxed);
    DECODED.fetch_add(expect.len(), Relaxed);

    let mut s = connect_hello(c).await;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(stream.len());
    let mut at = 0;
    for cut in cuts {
        // The daemon may close early (a bad frame): later writes then fail, as they should.
        if s.write_all(&stream[at..cut]).await.is_err() {
            break;
        }
        at = cut;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _ = s.shutdown().await;

    let mut got = vec![];
    let read = async {
        loop {
            match frame::read_frame(&mut s).await {
                Ok(f) if f.kind == FrameKind::Push => {}
                Ok(f) if f.kind == FrameKind::Response => {
                    match frame::decode::<Response>(&f.header) {
                        Err(e) => return Err(format!("undecodable response to {}: {e}", f.id)),
                        Ok(Ok(_)) => {
                            OK.fetch_add(1, Relaxed);
                        }
                        Ok(Err(_)) => {}
                    }
                    got.push(f.id);
                }
                Ok(f) => return Err(format!("daemon sent a {:?} frame", f.kind)),
                // How the connection ended: a clean close, or a reset.
                Err(e) => return Ok(e.to_string()),
            }
        }
    };
    let end = match tokio::time::timeout(CASE_WAIT, read).await {
        Err(_) => {
            return Err(format!(
                "no answer and no close within {CASE_WAIT:?}: answered {got:?} of {expect:?}"
            ))
        }
        Ok(r) => r?,
    };
    let log = c.log();
    let log = log.get(log_from..).unwrap_or_default();
    if let Some(at) = log.find("panicked") {
        return Err(format!("cairnd panicked: {}", &log[at..log.len().min(at + 600)]));
    }
    for id in &expect {
        let want = expect.iter().filter(|x| *x == id).count();
        if got.iter().filter(|x| *x == id).count() < want {
            return Err(format!(
                "request {id} got no answer (answered {got:?} of {expect:?}; the connection \
                 ended: {end})"
            ));
        }
    }

    let ping = async {
        let conn = Connection::connect(
            &c.addr,
            cairn_proto::msg::PeerKind::Cli,
            "fuzz-check",
            None,
            Duration::from_secs(5),
        )
        .await?;
        conn.call(Request::Ping, Bytes::new()).await
    };
    match tokio::time::timeout(CASE_WAIT, ping).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("daemon no longer serves a new connection: {e}")),
        Err(_) => return Err("daemon no longer answers PING".into()),
    }
    let root = Creds::root();
    let read = t.vol.read(&root, t.sentinel, 0, 4096);
    match tokio::time::timeout(CASE_WAIT, read).await {
        Ok(Ok((data, _))) if data[..] == *SENTINEL => Ok(()),
        Ok(Ok((data, _))) => Err(format!("sentinel reads back {data:?}")),
        Ok(Err(e)) => Err(format!("the well-behaved client's read fails: {e}")),
        Err(_) => Err("the well-behaved client's read hangs".into()),
    }
}

#[test]
fn mutated_request_frames_get_answers_and_harm_nothing_else() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let c = Cluster::start_plain();
    let t = rt.block_on(setup(&c));
    let cases = env_u64("PROPTEST_CASES").unwrap_or(100) as u32;
    let seed = env_u64("PROPTEST_RNG_SEED").unwrap_or_else(rand_seed);
    eprintln!(
        "wire fuzz: {cases} cases, seed {seed} (replay: PROPTEST_RNG_SEED={seed} \
         PROPTEST_CASES={cases})"
    );
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        // Each shrink step replays a case against the daemon: keep shrinking short.
        max_shrink_iters: 64,
        max_shrink_time: 120_000,
        ..Config::default()
    };
    let strategy = (
        prop::collection::vec((msg(&t), frame_mutation_or_intact(16)), 1..8),
        prop::collection::vec(any::<usize>(), 0..3),
    );
    let mut runner = TestRunner::new(config);
    let r = runner.run(&strategy, |(picks, cuts)| {
        // Every step of a case has its own bounded wait; this bounds the whole, so a write
        // the daemon never reads fails the case too.
        rt.block_on(async {
            match tokio::time::timeout(3 * CASE_WAIT, one_case(&c, &t, &picks, &cuts)).await {
                Ok(r) => r,
                Err(_) => Err(format!("the case did not finish in {:?}", 3 * CASE_WAIT)),
            }
        })
        .map_err(TestCaseError::fail)
    });
    if let Err(e) = r {
        let log = c.log();
        panic!(
            "wire fuzz failed (seed {seed}; replay: PROPTEST_RNG_SEED={seed} \
             PROPTEST_CASES={cases}): {e}\ncairnd log (tail):\n{}",
            &log[log.len().saturating_sub(3000)..]
        );
    }

    eprintln!(
        "wire fuzz: {} frames sent, {} decodable (answered), {} answered without an error",
        SENT.load(Relaxed),
        DECODED.load(Relaxed),
        OK.load(Relaxed)
    );
    // A fresh client reads the sentinel back byte-identical, and the version still greets.
    rt.block_on(async {
        let vol = c.mount("v").await.unwrap();
        let a = vol.lookup(&Creds::root(), Id::ROOT, b"sentinel").await.unwrap();
        assert_eq!(a.id, t.sentinel);
        let (data, _) = vol.read(&Creds::root(), t.sentinel, 0, 4096).await.unwrap();
        assert_eq!(&data[..], SENTINEL, "the sentinel file changed");
        connect_hello(&c).await;
        assert_eq!(PROTOCOL_VERSION, cairn_proto::PROTOCOL_VERSION);
    });
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos(),
    );
    h.finish()
}
