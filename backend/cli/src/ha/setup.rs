//! `cairn gateway ha setup`: form the gateways' Pacemaker cluster (pcs) or take the running
//! one, render this gateway's Ganesha HA config and the CIB resources with the appliance's
//! renderers (`ganesha-ha-conf`, `cib-resources`), load them, fencing on. The timeout
//! budget ([`super::budget`]) is checked before anything changes; a second run with the
//! same arguments changes nothing ([`same_xml`] decides whether the CIB already holds what
//! was rendered).

use super::budget::{self, Budget};
use super::status::{crm_status, program_exists, HaStatus};
use super::xml::tags;
use crate::args::HaSetupArgs;
use crate::exit;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One cluster property and whether this run set it.
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct HaProperty {
    pub name: String,
    pub value: String,
    pub changed: bool,
}

/// Where a VIP runs.
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct HaVipAt {
    pub vip: String,
    pub node: String,
}

/// What `cairn gateway ha setup` did.
#[derive(Serialize, Debug, Default, PartialEq)]
pub struct HaSetup {
    /// This gateway's node name.
    pub node: String,
    pub cluster_name: String,
    /// `formed` (pcs cluster setup by this run) or `existing`.
    pub cluster: String,
    pub nodes: Vec<String>,
    pub ganesha_conf: String,
    pub ganesha_conf_changed: bool,
    /// `created`, `replaced` or `unchanged`, for the resources, the constraints and the
    /// fencing topology (`none` when there is none).
    pub resources: String,
    pub constraints: String,
    pub fencing_topology: String,
    pub properties: Vec<HaProperty>,
    pub budget: Option<Budget>,
    /// The budget was broken and --force given.
    pub forced: bool,
    /// Where each VIP runs after the wait.
    pub vips: Vec<HaVipAt>,
    pub changed: bool,
}

/// The XML of `a` and `b` is the same CIB content: the same elements in the same order with
/// the same attributes (whitespace, attribute order, `<x/>` vs `<x></x>` ignored).
pub fn same_xml(a: &str, b: &str) -> bool {
    let canon = |x: &str| {
        let mut out = Vec::new();
        for t in tags(x) {
            if t.closing {
                out.push(format!("</{}>", t.name));
                continue;
            }
            out.push(format!("<{} {:?}>", t.name, t.attrs));
            if t.empty {
                out.push(format!("</{}>", t.name));
            }
        }
        out
    };
    canon(a) == canon(b)
}

/// Does this CIB section (or rendered file) hold a child element? (`<resources/>` does not.)
fn has_children(xml: &str) -> bool {
    tags(xml).len() > 2
}

/// Run PROG ARGS; stdout on success, else a message naming the command, its exit and stderr.
fn run(prog: &Path, args: &[String], env: &[(&str, &str)]) -> Result<String, String> {
    let shown = format!("`{} {}`", prog.display(), args.join(" "));
    let mut c = Command::new(prog);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    match c.output() {
        Err(e) => Err(format!("cannot run {shown}: {e}")),
        Ok(o) if !o.status.success() => Err(format!(
            "{shown} exited {}: {}",
            o.status.code().map_or("on a signal".into(), |c| c.to_string()),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(o) => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
    }
}

/// Run PROG ARGS with INPUT on its stdin (errors as [`run`]'s).
fn run_input(prog: &Path, args: &[String], input: &str) -> Result<String, String> {
    use std::process::Stdio;
    let shown = format!("`{} {}`", prog.display(), args.join(" "));
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(input.as_bytes());
    }
    let o = child.wait_with_output().map_err(|e| format!("{shown}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{shown} exited {}: {}",
            o.status.code().map_or("on a signal".into(), |c| c.to_string()),
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn strs(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// This machine's node name: Pacemaker's when it runs, else the host name.
fn local_node() -> String {
    run(Path::new("crm_node"), &strs(&["-n"]), &[])
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// corosync's running token and consensus timeouts (ms), when corosync-cmapctl answers.
fn corosync_timeouts() -> Option<(u64, Option<u64>)> {
    let get = |key: &str| {
        let o = run(Path::new("corosync-cmapctl"), &strs(&["-g", key]), &[]).ok()?;
        o.rsplit('=').next()?.trim().parse::<u64>().ok()
    };
    Some((get("runtime.config.totem.token")?, get("runtime.config.totem.consensus")))
}

/// The pcs command lines that form a new cluster, in order: host auth (the password goes
/// to its stdin), cluster setup with the token, start on every node, enable at boot.
pub fn pcs_form_commands(a: &HaSetupArgs) -> Vec<Vec<String>> {
    let members = || a.nodes.iter().flat_map(|n| [n.name.clone(), format!("addr={}", n.addr)]);
    let mut auth = strs(&["host", "auth"]);
    auth.extend(members());
    auth.extend(strs(&["-u", "hacluster"]));
    let mut setup = strs(&["cluster", "setup", &a.cluster_name]);
    setup.extend(members());
    setup.extend(strs(&["totem", &format!("token={}", a.token_ms)]));
    vec![
        auth,
        setup,
        strs(&["cluster", "start", "--all", "--wait=120"]),
        strs(&["cluster", "enable", "--all"]),
    ]
}

/// The nodes of the running cluster must be exactly the ones asked for.
pub fn check_cluster_nodes(st: &HaStatus, want: &[String]) -> Result<(), String> {
    let mut have: Vec<String> = st.nodes.iter().map(|n| n.name.clone()).collect();
    let mut want = want.to_vec();
    have.sort();
    want.sort();
    if have == want {
        return Ok(());
    }
    Err(format!(
        "the Pacemaker cluster running here has the gateways {} but --node names {}: \
         add or remove the gateways with pcs first (setup never changes a running cluster's membership)",
        if have.is_empty() { "none".into() } else { have.join(", ") },
        want.join(", ")
    ))
}

/// Check the arguments that clap cannot: one VIP per gateway, distinct names and VIPs.
pub fn check_args(a: &HaSetupArgs) -> Result<(), String> {
    if a.nodes.len() < 2 {
        return Err(format!("--node: at least two gateways are needed (got {})", a.nodes.len()));
    }
    if a.vips.len() != a.nodes.len() {
        return Err(format!(
            "one --vip per gateway: {} --node but {} --vip",
            a.nodes.len(),
            a.vips.len()
        ));
    }
    let mut names: Vec<&str> = a.nodes.iter().map(|n| n.name.as_str()).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("--node: gateway '{}' is named twice", w[0]));
    }
    let mut vips = a.vips.clone();
    vips.sort();
    if let Some(w) = vips.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("--vip: {} is given twice", w[0]));
    }
    if a.servers
        .split(',')
        .any(|s| s.rsplit_once(':').is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err()))
    {
        return Err(format!("--servers: '{}' is not HOST:PORT[,HOST:PORT...]", a.servers));
    }
    if a.services_ctl.is_some() && a.unfence_credentials.is_none() {
        return Err(
            "--services-ctl needs --unfence-credentials (it restarts a fenced gateway's daemons)"
                .into(),
        );
    }
    Ok(())
}

/// The budget of these arguments with corosync's timeouts (running ones when known).
pub fn budget_of(a: &HaSetupArgs, corosync: Option<(u64, Option<u64>)>) -> Budget {
    // corosync's runtime token: the configured one plus token_coefficient (650 ms) per node
    // over two; consensus defaults to 1.2 x that
    let (token, consensus) =
        corosync.unwrap_or((a.token_ms + 650 * (a.nodes.len() as u64).saturating_sub(2), None));
    budget::check(
        a.backend_detection,
        a.backend_timeout,
        token,
        consensus,
        a.fence_timeout,
        a.lease,
        a.grace.unwrap_or(a.lease),
        a.client_timeout,
    )
}

struct Ctx<'a> {
    a: &'a HaSetupArgs,
    tmp: PathBuf,
}

impl Ctx<'_> {
    fn helper(&self, name: &str) -> PathBuf {
        self.a.ha_dir.join(name)
    }

    fn form_cluster(&self) -> Result<(), String> {
        let a = self.a;
        if !program_exists(&a.pcs) {
            return Err(format!(
                "no Pacemaker cluster runs here and {} is not found to form one (install pcs, or --pcs / CAIRN_PCS)",
                a.pcs.display()
            ));
        }
        let pw_file = a.password_file.as_ref().ok_or(
            "no Pacemaker cluster runs here and --password-file is missing: pcs host auth needs the hacluster password",
        )?;
        let pw = std::fs::read_to_string(pw_file)
            .map_err(|e| format!("cannot read --password-file {}: {e}", pw_file.display()))?;
        let pw = pw.trim_end_matches(['\n', '\r']);
        let cmds = pcs_form_commands(a);
        // pcs host auth reads the password from stdin when it is not a terminal (never on
        // the command line, where `ps` would show it)
        run_input(&a.pcs, &cmds[0], &format!("{pw}\n"))?;
        for c in &cmds[1..] {
            run(&a.pcs, c, &[])?;
        }
        Ok(())
    }

    /// Render this gateway's ganesha.conf; write it when it differs. Ok(changed).
    fn ganesha_conf(&self, me: &str) -> Result<bool, String> {
        let a = self.a;
        let root = a.recovery_root.join("nfs").join(me);
        let mut args = vec![
            "--node".into(),
            me.to_string(),
            "--servers".into(),
            a.servers.clone(),
            "--volume".into(),
            a.volume.clone(),
            "--recovery-root".into(),
            root.display().to_string(),
            "--lease".into(),
            a.lease.to_string(),
            "--grace".into(),
            a.grace.unwrap_or(a.lease).to_string(),
        ];
        if let Some(p) = &a.ganesha_plugins {
            args.extend(["--plugins".into(), p.display().to_string()]);
        }
        let conf = run(&self.helper("ganesha-ha-conf"), &args, &[])?;
        if std::fs::read_to_string(&a.ganesha_conf).ok().as_deref() == Some(conf.as_str()) {
            return Ok(false);
        }
        let tmp = a.ganesha_conf.with_extension("conf.cairn-tmp");
        std::fs::write(&tmp, &conf)
            .and_then(|_| std::fs::rename(&tmp, &a.ganesha_conf))
            .map_err(|e| format!("cannot write {}: {e}", a.ganesha_conf.display()))?;
        Ok(true)
    }

    /// Render the resources and constraints into the temp dir; their paths.
    fn render_cib(&self) -> Result<(PathBuf, PathBuf), String> {
        let a = self.a;
        let (r, c) = (self.tmp.join("resources.xml"), self.tmp.join("constraints.xml"));
        let join = |v: Vec<String>| v.join(",");
        let mut args = vec![
            "--nodes".into(),
            join(a.nodes.iter().map(|n| n.name.clone()).collect()),
            "--vips".into(),
            join(a.vips.clone()),
            "--cidr".into(),
            a.cidr.to_string(),
            "--recovery-root".into(),
            a.recovery_root.display().to_string(),
            "--servers".into(),
            a.servers.clone(),
            "--volume".into(),
            a.volume.clone(),
            "--resources-out".into(),
            r.display().to_string(),
            "--constraints-out".into(),
            c.display().to_string(),
            "--smb".into(),
            a.smb.to_string(),
            "--backend-timeout".into(),
            a.backend_timeout.to_string(),
            "--backend-detection".into(),
            a.backend_detection.to_string(),
            "--tickle-sync".into(),
            self.helper("bin/cairn-tickle-sync").display().to_string(),
        ];
        let opt = |flag: &str, v: Option<String>| v.map(|v| [flag.to_string(), v]);
        for pair in [
            opt("--nic", a.nic.clone()),
            opt("--fencing", a.fencing.as_ref().map(|p| p.display().to_string())),
            opt(
                "--unfence-credentials",
                a.unfence_credentials.as_ref().map(|p| p.display().to_string()),
            ),
            opt("--services-ctl", a.services_ctl.clone()),
        ]
        .into_iter()
        .flatten()
        {
            args.extend(pair);
        }
        let cli = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "cairn".into());
        run(&self.helper("cib-resources"), &args, &[("CAIRN_CLI", &cli)])?;
        Ok((r, c))
    }

    /// Make CIB section `section` hold FILE's content. `created`, `replaced`, `unchanged`.
    fn load(&self, section: &str, file: &Path) -> Result<String, String> {
        let want = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let cib = Path::new("cibadmin");
        // an absent section (fencing-topology) is an error of the query
        let have = run(cib, &strs(&["-Q", "-o", section]), &[]).ok();
        match have {
            Some(h) if same_xml(&h, &want) => Ok("unchanged".into()),
            Some(h) if has_children(&h) || section == "fencing-topology" => {
                run(
                    cib,
                    &strs(&["--replace", "-o", section, "--xml-file", &file.display().to_string()]),
                    &[],
                )
                .map_err(|e| format!("replacing the CIB's {section}: {e}"))?;
                Ok(if has_children(&h) { "replaced" } else { "created" }.into())
            }
            Some(_) => {
                run(
                    cib,
                    &strs(&["-C", "-o", section, "--xml-file", &file.display().to_string()]),
                    &[],
                )
                .map_err(|e| format!("loading the CIB's {section}: {e}"))?;
                Ok("created".into())
            }
            None => {
                run(
                    cib,
                    &strs(&[
                        "-C",
                        "-o",
                        "configuration",
                        "--xml-file",
                        &file.display().to_string(),
                    ]),
                    &[],
                )
                .map_err(|e| format!("loading the CIB's {section}: {e}"))?;
                Ok("created".into())
            }
        }
    }

    fn property(&self, name: &str, value: &str) -> Result<HaProperty, String> {
        let ca = Path::new("crm_attribute");
        let now =
            run(ca, &strs(&["-t", "crm_config", "-n", name, "-G", "-q"]), &[]).unwrap_or_default();
        let changed = now.trim() != value;
        if changed {
            run(ca, &strs(&["-t", "crm_config", "-n", name, "-v", value]), &[])
                .map_err(|e| format!("setting cluster property {name}={value}: {e}"))?;
        }
        Ok(HaProperty { name: name.into(), value: value.into(), changed })
    }
}

fn render(s: &HaSetup) -> String {
    let mut o = format!(
        "cairn gateway ha setup on {}: cluster {} ({}): {}\n",
        s.node,
        s.cluster_name,
        s.nodes.join(", "),
        if s.cluster == "formed" {
            "formed (pcs cluster setup, start, enable)"
        } else {
            "running, taken as it is"
        }
    );
    if let Some(b) = &s.budget {
        o.push_str("  ");
        o.push_str(&budget::render(b));
        for v in &b.violations {
            o.push_str(&format!("    (--force) {v}\n"));
        }
    }
    let ch = |c: bool| if c { "written (restart Ganesha to load it)" } else { "unchanged" };
    o.push_str(&format!("  Ganesha config {}: {}\n", s.ganesha_conf, ch(s.ganesha_conf_changed)));
    o.push_str(&format!(
        "  CIB: resources {}, constraints {}, fencing topology {}\n",
        s.resources, s.constraints, s.fencing_topology
    ));
    let props: Vec<String> = s
        .properties
        .iter()
        .map(|p| {
            format!("{}={} ({})", p.name, p.value, if p.changed { "set" } else { "unchanged" })
        })
        .collect();
    o.push_str(&format!("  properties: {}\n", props.join(", ")));
    if !s.vips.is_empty() {
        let v: Vec<String> = s.vips.iter().map(|v| format!("{} on {}", v.vip, v.node)).collect();
        o.push_str(&format!("  VIPs: {}\n", v.join(", ")));
    }
    o.push_str(&format!("changed: {}\n", if s.changed { "yes" } else { "no" }));
    o
}

/// `cairn gateway ha setup`.
pub fn setup(a: &HaSetupArgs, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let fail = |err: &mut dyn Write, code: i32, msg: String| {
        let _ = writeln!(err, "cairn gateway ha setup: {msg}");
        code
    };
    if let Err(e) = check_args(a) {
        return fail(err, exit::USAGE, e);
    }
    for h in ["ganesha-ha-conf", "cib-resources"] {
        if !a.ha_dir.join(h).is_file() {
            return fail(
                err,
                exit::FAILED,
                format!(
                    "{} not found: --ha-dir / CAIRN_HA_DIR must name the HA helpers' directory",
                    a.ha_dir.join(h).display()
                ),
            );
        }
    }
    for (prog, what) in [
        (a.crm_mon.as_path(), "--crm-mon / CAIRN_CRM_MON"),
        (Path::new("cibadmin"), "PATH"),
        (Path::new("crm_attribute"), "PATH"),
    ] {
        if !program_exists(prog) {
            return fail(
                err,
                exit::FAILED,
                format!(
                    "{} not found ({what}): install pacemaker and pacemaker-cli-utils",
                    prog.display()
                ),
            );
        }
    }
    let names: Vec<String> = a.nodes.iter().map(|n| n.name.clone()).collect();
    let mut s = HaSetup {
        cluster_name: a.cluster_name.clone(),
        nodes: names.clone(),
        ganesha_conf: a.ganesha_conf.display().to_string(),
        ..Default::default()
    };
    // 1. read-only: the running cluster, this node, corosync's timeouts, the budget
    let running = crm_status(&a.crm_mon).ok();
    if let Some(st) = &running {
        if let Err(e) = check_cluster_nodes(st, &names) {
            return fail(err, exit::FAILED, e);
        }
    }
    s.node = local_node();
    if !names.contains(&s.node) {
        return fail(
            err,
            exit::FAILED,
            format!(
                "this machine is '{}', not one of the --node gateways ({}): run setup on a gateway",
                s.node,
                names.join(", ")
            ),
        );
    }
    let b = budget_of(a, if running.is_some() { corosync_timeouts() } else { None });
    if !b.violations.is_empty() && !a.force {
        let _ = err.write_all(budget::render(&b).as_bytes());
        return fail(
            err,
            exit::USAGE,
            format!(
                "timeout budget broken (nothing changed; --force to set up anyway): {}",
                b.violations.join("; ")
            ),
        );
    }
    s.forced = !b.violations.is_empty();
    s.budget = Some(b);
    let tmp = std::env::temp_dir().join(format!("cairn-ha-setup.{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        return fail(err, exit::FAILED, format!("cannot create {}: {e}", tmp.display()));
    }
    let ctx = Ctx { a, tmp: tmp.clone() };
    let r = setup_steps(&ctx, running.is_some(), &mut s);
    let _ = std::fs::remove_dir_all(&tmp);
    if let Err(e) = r {
        return fail(err, exit::FAILED, e);
    }
    let shown = if json {
        serde_json::to_string_pretty(&s).map(|j| j + "\n").unwrap_or_default()
    } else {
        render(&s)
    };
    let _ = out.write_all(shown.as_bytes());
    exit::OK
}

fn setup_steps(ctx: &Ctx, running: bool, s: &mut HaSetup) -> Result<(), String> {
    let a = ctx.a;
    // the resources first (read-only): a cluster without a fence device is refused
    let (res, cons) = ctx.render_cib()?;
    let rendered =
        std::fs::read_to_string(&res).map_err(|e| format!("cannot read {}: {e}", res.display()))?;
    let in_cib = running
        && run(Path::new("cibadmin"), &strs(&["-Q", "-o", "resources"]), &[])
            .is_ok_and(|x| x.contains("class=\"stonith\""));
    if !rendered.contains("class=\"stonith\"") && !in_cib {
        return Err("no fence device: pass --fencing FILE with the stonith primitives (fence_aws, fence_sbd, fence_virsh...; docs/ha.md, \"Fencing\"): the gateways never run with fencing off".into());
    }
    // 2. the cluster
    s.cluster = if running { "existing".into() } else { "formed".into() };
    if !running {
        ctx.form_cluster()?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(a.wait.max(60));
        loop {
            match crm_status(&a.crm_mon) {
                Ok(st) if st.nodes.len() == a.nodes.len() && st.nodes.iter().all(|n| n.online) => {
                    break
                }
                Ok(st) if std::time::Instant::now() >= deadline => {
                    let off: Vec<&str> =
                        st.nodes.iter().filter(|n| !n.online).map(|n| n.name.as_str()).collect();
                    return Err(format!(
                        "the cluster formed but gateways are not online: {}",
                        off.join(", ")
                    ));
                }
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(format!("the cluster did not come up: {e}"))
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(500)),
            }
        }
    }
    // 3. Ganesha
    s.ganesha_conf_changed = ctx.ganesha_conf(&s.node)?;
    // 4. properties, then the resources (the fence devices with them), constraints, topology
    s.properties =
        vec![ctx.property("stonith-enabled", "true")?, ctx.property("no-quorum-policy", "stop")?];
    s.resources = ctx.load("resources", &res)?;
    s.constraints = ctx.load("constraints", &cons)?;
    s.fencing_topology = match &a.fencing_topology {
        Some(f) => ctx.load("fencing-topology", f)?,
        None => "none".into(),
    };
    s.changed = s.cluster == "formed"
        || s.ganesha_conf_changed
        || s.properties.iter().any(|p| p.changed)
        || [&s.resources, &s.constraints, &s.fencing_topology]
            .iter()
            .any(|x| *x == "created" || *x == "replaced");
    // 5. the VIPs settle
    if a.wait > 0 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(a.wait);
        loop {
            let pending = match crm_status(&a.crm_mon) {
                Err(e) => e,
                Ok(st) => {
                    let bad: Vec<String> = st
                        .vips
                        .iter()
                        .filter(|v| v.nodes.len() != 1)
                        .map(|v| {
                            format!(
                                "{} runs on {}",
                                v.resource,
                                if v.nodes.is_empty() {
                                    "no gateway".into()
                                } else {
                                    v.nodes.join(", ")
                                }
                            )
                        })
                        .collect();
                    if bad.is_empty() && st.vips.len() == a.vips.len() {
                        s.vips = st
                            .vips
                            .iter()
                            .map(|v| HaVipAt { vip: v.resource.clone(), node: v.nodes[0].clone() })
                            .collect();
                        break;
                    }
                    if bad.is_empty() {
                        format!("{} of {} VIPs configured", st.vips.len(), a.vips.len())
                    } else {
                        bad.join("; ")
                    }
                }
            };
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "configured, but the VIPs did not settle within {}s: {pending} (see `cairn gateway ha status`)",
                    a.wait
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
    Ok(())
}
