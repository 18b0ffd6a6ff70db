//! `mount.cairn` — mount a Cairn volume through FUSE.
//!
//! `mount.cairn HOST[:PORT]:/VOLUME[/SUBDIR] MOUNTPOINT [-o OPTIONS] [-f]`
//!
//! The volume is mounted on the client side (`Volume::mount`: fetch the map, connect)
//! before the kernel mount, so a wrong server or volume is reported on stderr and in the
//! exit status (1: bad invocation, 32: mount failure, as mount(8) expects). Unless `-f`,
//! the process forks first and the parent waits for the child to report that both mounts
//! succeeded; the child then runs in the background until `umount` / `fusermount3 -u`,
//! flushes write-behind (`Volume::unmount`) and exits.

mod creds;
mod fs;
mod inodes;
mod lend;
mod options;

use anyhow::{bail, Context};
use cairn_client::{Creds, FileType, MountOptions, Volume};
use options::Args;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const EXIT_USAGE: u8 = 1;
const EXIT_FAIL: u8 = 32;
const UNMOUNT_TIMEOUT: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let is_root = unsafe { libc::geteuid() } == 0;
    let parsed = options::parse(&argv, is_root).and_then(|mut a| {
        a.workers = options::env_count("CAIRN_MOUNT_WORKERS", options::DEFAULT_THREADS)?;
        a.fuse_threads = options::env_count("CAIRN_MOUNT_FUSE_THREADS", options::DEFAULT_THREADS)?;
        Ok(a)
    });
    let args = match parsed {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mount.cairn: {e}");
            if !e.starts_with("usage:") {
                eprintln!("{}", options::USAGE);
            }
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match std::fs::metadata(&args.mountpoint) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            eprintln!("mount.cairn: mount point {} is not a directory", args.mountpoint.display());
            return ExitCode::from(EXIT_FAIL);
        }
        Err(e) => {
            eprintln!("mount.cairn: mount point {}: {e}", args.mountpoint.display());
            return ExitCode::from(EXIT_FAIL);
        }
    }

    // Fork before any thread exists; the parent only relays the child's verdict.
    let status_pipe = if args.foreground {
        None
    } else {
        match daemonize() {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("mount.cairn: cannot fork: {e}");
                return ExitCode::from(EXIT_FAIL);
            }
        }
    };
    init_logging(&args);
    match run(args, status_pipe) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Still attached to the caller's stderr only if the mount never succeeded.
            eprintln!("mount.cairn: {e:#}");
            tracing::error!("{e:#}");
            ExitCode::from(EXIT_FAIL)
        }
    }
}

/// Fork; the parent waits for one status byte (0 = mounted) and exits with it. Returns
/// the write end of the status pipe in the child.
fn daemonize() -> std::io::Result<std::fs::File> {
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (r, w) =
        unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) };
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            drop(r);
            unsafe { libc::setsid() };
            Ok(w)
        }
        _child => {
            drop(w);
            let mut r = r;
            let mut b = [0u8; 1];
            let code = match r.read(&mut b) {
                Ok(1) => b[0],
                _ => {
                    eprintln!("mount.cairn: the mount process exited before mounting");
                    EXIT_FAIL
                }
            };
            std::process::exit(code as i32);
        }
    }
}

fn init_logging(args: &Args) {
    use tracing_subscriber::EnvFilter;
    // Warnings, and the reloads of the credentials file (docs/security.md, "Rotation").
    let default = if args.debug { "debug" } else { "warn,cairn_proto::tls=info" };
    let filter = EnvFilter::try_from_env("CAIRN_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if args.foreground {
        builder.with_writer(std::io::stderr).init();
        return;
    }
    let path = args.log_file.clone().unwrap_or_else(|| default_log_path(args));
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::OpenOptions::new().create(true).append(true).open(&path) {
        Ok(f) => builder.with_ansi(false).with_writer(std::sync::Mutex::new(f)).init(),
        // No log file: errors before the mount still reach stderr through main().
        Err(_) => builder.with_writer(std::io::sink).init(),
    }
}

fn default_log_path(args: &Args) -> PathBuf {
    let mp = args.mountpoint.to_string_lossy().trim_matches('/').replace('/', "-");
    let mp = if mp.is_empty() { "root".to_string() } else { mp };
    PathBuf::from(format!("/var/log/cairn/mount-{mp}.log"))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

fn run(args: Args, status_pipe: Option<std::fs::File>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers)
        .thread_name("cairn-mount")
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;

    let mopts = MountOptions {
        servers: args.servers.clone(),
        volume: args.volume.clone(),
        client_name: format!("mount.cairn@{}", hostname()),
        write_behind: args.write_behind,
        cache_timeout: args.attr_timeout,
        quick_read: args.quick_read,
        ..MountOptions::default()
    };
    if args.plain {
        cairn_proto::tls::set_default(cairn_proto::tls::Transport::Plain);
    } else if let Some(path) = &args.credentials {
        let t = cairn_proto::tls::from_env(Some(path))
            .map_err(|e| anyhow::anyhow!("credentials={}: {}", path.display(), e.message))?;
        cairn_proto::tls::set_default(t);
    }
    let vol = rt.block_on(Volume::mount(mopts)).map_err(|e| {
        anyhow::anyhow!(
            "cannot mount volume '{}' from {}: {e}",
            args.volume,
            args.servers.join(",")
        )
    })?;

    let root = if args.subdir.is_empty() {
        cairn_client::Id::ROOT
    } else {
        let a = rt.block_on(vol.resolve(&Creds::root(), args.subdir.as_bytes())).map_err(|e| {
            anyhow::anyhow!("volume '{}': sub-directory '{}': {e}", args.volume, args.subdir)
        });
        let a = match a {
            Ok(a) => a,
            Err(e) => {
                let _ = rt.block_on(vol.unmount());
                return Err(e);
            }
        };
        if a.kind != FileType::Directory {
            let _ = rt.block_on(vol.unmount());
            bail!("volume '{}': '{}' is not a directory", args.volume, args.subdir);
        }
        a.id
    };

    let cfg = fs::FsConfig {
        attr_ttl: args.attr_timeout,
        entry_ttl: args.entry_timeout,
        writeback_cache: args.writeback_cache,
        session_threads: args.fuse_threads,
    };
    let filesystem = fs::CairnFs::new(vol.clone(), root, cfg, rt.handle().clone());

    let mut mount_opts = vec![
        fuser::MountOption::FSName(args.source.clone()),
        // Type `fuse.cairn` in /proc/mounts (findmnt -t, umount -a -t, df -t select on
        // it). fuser's own Subtype option only reaches fusermount3 (mounts by non-root
        // users); its mount(2) for root passes type "fuse" and drops it. As a kernel option
        // (FUSE's "subtype" mount parameter) it reaches both paths.
        fuser::MountOption::CUSTOM("subtype=cairn".into()),
        fuser::MountOption::DefaultPermissions,
    ];
    if args.read_only {
        mount_opts.push(fuser::MountOption::RO);
    }
    for (i, f) in args.kernel_flags.iter().enumerate() {
        // fuser refuses opposing flags (`suid,nosuid`): the last one given wins, as with
        // mount(8).
        let later = &args.kernel_flags[i + 1..];
        if !later.iter().any(|g| opposite(f) == Some(g.as_str())) {
            mount_opts.push(kernel_flag(f));
        }
    }
    let mut config = fuser::Config::default();
    config.mount_options = mount_opts;
    if args.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    // Several threads read requests, each from its own clone of the /dev/fuse descriptor
    // (FUSE_DEV_IOC_CLONE, as libfuse's `clone_fd`): the kernel hands each request to one
    // of them and takes its reply on the same descriptor.
    config.n_threads = Some(args.fuse_threads);
    config.clone_fd = true;

    // The invalidator must share the filesystem's inode table: take it before the
    // filesystem moves into the session.
    let make_inval = filesystem.invalidator_factory();
    let mut session = match fuser::Session::new(filesystem, &args.mountpoint, &config) {
        Ok(s) => s,
        Err(e) => {
            let _ = rt.block_on(vol.unmount());
            bail!("cannot mount FUSE at {}: {e}", args.mountpoint.display());
        }
    };
    vol.on_invalidate(make_inval(session.notifier()));

    // SIGTERM / SIGINT: unmount, which ends the session loop below.
    let mut unmounter = session.unmount_callable();
    rt.spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) =
            (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
        else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("signal received, unmounting");
        let _ = unmounter.unmount();
    });

    tracing::info!(volume = %args.volume, mountpoint = %args.mountpoint.display(), "mounted");
    if let Some(mut w) = status_pipe {
        detach_stdio();
        let _ = w.write_all(&[0]);
    }

    // Returns once the kernel ends the session (umount, or the signal above); dropping
    // the session inside unmounts if that has not happened yet.
    let result = session.run();
    if let Err(e) = &result {
        tracing::error!(mountpoint = %args.mountpoint.display(), error = %e, "FUSE session failed");
    }
    let flushed = rt.block_on(async { tokio::time::timeout(UNMOUNT_TIMEOUT, vol.unmount()).await });
    match flushed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => bail!("volume '{}': flushing on unmount: {e}", args.volume),
        Err(_) => bail!("volume '{}': flushing on unmount timed out", args.volume),
    }
    result.with_context(|| format!("FUSE session at {}", args.mountpoint.display()))?;
    tracing::info!(volume = %args.volume, "unmounted");
    Ok(())
}

/// The kernel flag `f` cancels.
fn opposite(f: &str) -> Option<&'static str> {
    Some(match f {
        "dev" => "nodev",
        "nodev" => "dev",
        "suid" => "nosuid",
        "nosuid" => "suid",
        "exec" => "noexec",
        "noexec" => "exec",
        "atime" => "noatime",
        "noatime" => "atime",
        "sync" => "async",
        "async" => "sync",
        _ => return None,
    })
}

fn kernel_flag(f: &str) -> fuser::MountOption {
    use fuser::MountOption as M;
    match f {
        "dev" => M::Dev,
        "nodev" => M::NoDev,
        "suid" => M::Suid,
        "nosuid" => M::NoSuid,
        "exec" => M::Exec,
        "noexec" => M::NoExec,
        "atime" => M::Atime,
        "noatime" => M::NoAtime,
        "sync" => M::Sync,
        "async" => M::Async,
        "dirsync" => M::DirSync,
        _ => M::RW,
    }
}

/// Background mount: let go of the caller's terminal and pipes.
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        let fd = null.into_raw_fd();
        unsafe {
            libc::dup2(fd, 0);
            libc::dup2(fd, 1);
            libc::dup2(fd, 2);
            libc::close(fd);
        }
    }
    let _ = std::env::set_current_dir("/");
}
