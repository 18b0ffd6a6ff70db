//! `cairn gateway ha setup`: its command line, the checks it makes before it changes
//! anything, and how it decides that the CIB already holds what it rendered.

use super::setup::{budget_of, check_args, check_cluster_nodes, pcs_form_commands, same_xml};
use super::status::summarize;
use crate::args::{Cli, Command, GatewayCmd, GatewayHaCmd, HaSetupArgs};
use clap::Parser;

fn parse(extra: &[&str]) -> Result<HaSetupArgs, clap::Error> {
    let mut v = vec!["cairn", "gateway", "ha", "setup"];
    v.extend_from_slice(extra);
    let cli = Cli::try_parse_from(v)?;
    match cli.command {
        Command::Gateway(GatewayCmd::Ha(GatewayHaCmd::Setup(a))) => Ok(*a),
        other => panic!("parsed as {other:?}"),
    }
}

const BASE: &[&str] = &[
    "--node",
    "gw1=10.0.0.21",
    "--node",
    "gw2=10.0.0.22",
    "--vip",
    "10.0.0.31",
    "--vip",
    "10.0.0.32",
    "--volume",
    "vol0",
    "--servers",
    "10.0.0.11:7420,10.0.0.12:7420",
];

fn with(extra: &[&str]) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = BASE.to_vec();
    for e in extra {
        v.push(Box::leak(e.to_string().into_boxed_str()));
    }
    v
}

#[test]
fn setup_parses_nodes_vips_and_defaults() {
    let a = parse(BASE).unwrap();
    assert_eq!(a.nodes.len(), 2);
    assert_eq!((a.nodes[1].name.as_str(), a.nodes[1].addr.as_str()), ("gw2", "10.0.0.22"));
    assert_eq!(a.vips, vec!["10.0.0.31", "10.0.0.32"]);
    assert_eq!((a.cidr, a.lease, a.grace, a.token_ms), (24, 10, None, 3000));
    assert_eq!(
        (a.backend_detection, a.backend_timeout, a.fence_timeout, a.client_timeout),
        (10, 15, 15, 60)
    );
    assert_eq!(a.cluster_name, "cairn-gw");
    assert!(!a.force && !a.smb);
    assert!(check_args(&a).is_ok());
    assert!(budget_of(&a, None).violations.is_empty());
}

#[test]
fn setup_refuses_bad_command_lines() {
    let e = parse(&with(&[])[..]).map(|_| ()).err();
    assert!(e.is_none());
    for (bad, want) in [
        (
            vec!["--node", "gw1", "--vip", "10.0.0.31", "--volume", "v", "--servers", "h:1"],
            "is not NAME=ADDRESS",
        ),
        (
            vec![
                "--node",
                "g w=1.2.3.4",
                "--vip",
                "10.0.0.31",
                "--volume",
                "v",
                "--servers",
                "h:1",
            ],
            "is not a node name",
        ),
        (
            vec!["--node", "gw1=a", "--vip", "10.0.0.300", "--volume", "v", "--servers", "h:1"],
            "is not an IPv4 address",
        ),
        (vec!["--vip", "10.0.0.31", "--volume", "v", "--servers", "h:1"], "--node"),
    ] {
        let e = parse(&bad).expect_err(want).to_string();
        assert!(e.contains(want), "{bad:?}: {e}");
    }
    assert!(parse(&with(&["--cidr", "33"])).is_err());
    assert!(parse(&with(&["--lease", "x"])).is_err());
}

#[test]
fn setup_checks_what_clap_cannot() {
    let one =
        parse(&["--node", "gw1=a", "--vip", "10.0.0.31", "--volume", "v", "--servers", "h:1"])
            .unwrap();
    assert!(check_args(&one).unwrap_err().contains("at least two gateways"));
    let a = parse(&with(&["--vip", "10.0.0.33"])).unwrap();
    assert_eq!(check_args(&a).unwrap_err(), "one --vip per gateway: 2 --node but 3 --vip");
    let a = parse(&[
        "--node",
        "gw1=a",
        "--node",
        "gw1=b",
        "--vip",
        "10.0.0.31",
        "--vip",
        "10.0.0.32",
        "--volume",
        "v",
        "--servers",
        "h:1",
    ])
    .unwrap();
    assert!(check_args(&a).unwrap_err().contains("'gw1' is named twice"));
    let a = parse(&[
        "--node",
        "gw1=a",
        "--node",
        "gw2=b",
        "--vip",
        "10.0.0.31",
        "--vip",
        "10.0.0.31",
        "--volume",
        "v",
        "--servers",
        "h:1",
    ])
    .unwrap();
    assert!(check_args(&a).unwrap_err().contains("10.0.0.31 is given twice"));
    let mut a = parse(BASE).unwrap();
    a.servers = "n1".into();
    assert!(check_args(&a).unwrap_err().contains("--servers: 'n1' is not HOST:PORT"));
    let a = parse(&with(&["--services-ctl", "x"])).unwrap();
    assert!(check_args(&a).unwrap_err().contains("--services-ctl needs --unfence-credentials"));
}

#[test]
fn setup_budget_uses_the_running_corosync_timeouts() {
    let a = parse(&with(&["--client-timeout", "45"])).unwrap();
    // shipped token 3000 ms, two gateways: 3 + 3.6 + 15 + 5 + 10 + 5 = 41.6 s < 45 s
    assert!(budget_of(&a, None).violations.is_empty());
    assert_eq!(budget_of(&a, None).failover_ms, 41_600);
    // three gateways: corosync's token_coefficient makes the token 3650 ms
    let a3 = parse(&with(&["--node", "gw3=10.0.0.23", "--vip", "10.0.0.33"])).unwrap();
    assert_eq!(budget_of(&a3, None).token_ms, 3650);
    assert_eq!(budget_of(&a3, None).failover_ms, 43_030);
    // a running cluster with token 5000 ms, consensus 6000 ms: 5 + 6 + 15 + 5 + 10 + 5 = 46 s
    let b = budget_of(&a, Some((5000, Some(6000))));
    assert_eq!(b.failover_ms, 46_000);
    assert_eq!(b.violations.len(), 1);
    assert!(b.violations[0].contains("corosync token 5 s + consensus 6 s"), "{}", b.violations[0]);
    let a = parse(&with(&["--backend-timeout", "10"])).unwrap();
    assert!(budget_of(&a, None).violations[0].contains("--backend-detection"));
    let a = parse(&with(&["--lease", "20", "--grace", "15"])).unwrap();
    assert!(budget_of(&a, None)
        .violations
        .iter()
        .any(|v| v.contains("grace period (15 s, --grace)")));
}

#[test]
fn same_xml_ignores_layout_not_content() {
    let rendered = r#"<resources><group id="g"><meta_attributes id="m"><nvpair id="n" name="a" value="1"/></meta_attributes></group>
</resources>"#;
    let cib = r#"<resources>
  <group id="g">
    <meta_attributes id="m">
      <nvpair value="1" name="a" id="n"></nvpair>
    </meta_attributes>
  </group>
</resources>
"#;
    assert!(same_xml(rendered, cib));
    assert!(!same_xml(rendered, &cib.replace("value=\"1\"", "value=\"2\"")));
    assert!(!same_xml(rendered, "<resources/>"));
    assert!(same_xml("<resources/>", "<resources></resources>"));
}

#[test]
fn setup_takes_a_running_cluster_only_with_the_same_gateways() {
    let xml = r#"<pacemaker-result><summary><current_dc present="true" name="gw1" with_quorum="true"/></summary><nodes>
<node name="gw1" id="1" online="true" standby="false" unclean="false"/>
<node name="gw2" id="2" online="true" standby="false" unclean="false"/>
</nodes><status code="0" message="OK"/></pacemaker-result>"#;
    let st = summarize(xml).unwrap();
    assert!(check_cluster_nodes(&st, &["gw2".into(), "gw1".into()]).is_ok());
    let e = check_cluster_nodes(&st, &["gw1".into(), "gw3".into()]).unwrap_err();
    assert!(e.contains("has the gateways gw1, gw2 but --node names gw1, gw3"), "{e}");
}

#[test]
fn setup_forms_a_cluster_with_these_pcs_commands() {
    let a = parse(&with(&["--cluster-name", "gwc", "--token-ms", "4000"])).unwrap();
    let cmds: Vec<String> = pcs_form_commands(&a).iter().map(|c| c.join(" ")).collect();
    assert_eq!(
        cmds,
        vec![
            "host auth gw1 addr=10.0.0.21 gw2 addr=10.0.0.22 -u hacluster",
            "cluster setup gwc gw1 addr=10.0.0.21 gw2 addr=10.0.0.22 totem token=4000",
            "cluster start --all --wait=120",
            "cluster enable --all",
        ]
    );
    // the password never is an argument
    assert!(!cmds.iter().any(|c| c.contains(" -p")));
}
