//! `cairn cluster ca` and `cairn client certificate`: the cluster CA and the certificates
//! it issues.

use clap::{Subcommand, ValueEnum};

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum ClusterCmd {
    /// The cluster CA.
    #[command(subcommand)]
    Ca(CaCmd),
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum CaCmd {
    /// Replace the cluster CA without downtime, in two steps (docs/security.md,
    /// "Rotation").
    #[command(long_about = CA_ROTATE_ABOUT)]
    Rotate(CaRotate),
}

const CA_ROTATE_ABOUT: &str = "\
Replace the cluster CA without downtime, in two steps, on the node that holds the CA, as \
root (like `ceph orch certmgr` / kubeadm's CA rotation: a transition with both CAs \
trusted, then the old one retired).

`cairn cluster ca rotate` creates a new CA (ca.pem, ca.key; the old certificate kept as \
ca-old.pem), writes the trust bundle ca-bundle.pem (new + old), and re-issues the admin \
credential admin.pem under the new CA with the bundle. Every cairnd whose CA dir holds the \
CA trusts both within seconds (reloaded, no restart) and keeps its certificate, so \
clients that trust only the old CA still reach it. Credentials issued from now on \
(`client certificate issue`) are of the new CA and trust both: re-issue every client, \
gateway and remote node credential now. Certificates of either CA are accepted meanwhile.

`cairn cluster ca rotate --finish` retires the old CA: the bundle holds the new CA only; \
admin.pem and every cairnd holding the CA trust only it, and those cairnd re-issue their \
node certificates under it (within seconds, reloaded). A certificate of the old CA is \
refused at the next handshake; sessions already open go on until they close.";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct CaRotate {
    /// Retire the old CA (the second step).
    #[arg(long)]
    pub finish: bool,
    /// Directory of the cluster CA. Default: $CAIRN_CA_DIR, else the first of
    /// /var/lib/cairn and /etc/cairn (the appliance's) that holds ca.key.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<std::path::PathBuf>,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum ClientCmd {
    /// Certificates of the cluster CA.
    #[command(subcommand)]
    Certificate(CertCmd),
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum CertCmd {
    /// Issue a certificate and key for NAME, signed by the cluster CA.
    #[command(long_about = CERT_ISSUE_ABOUT, after_long_help = CERT_ISSUE_EXAMPLES)]
    Issue(CertIssue),
    /// Every certificate recorded as issued: serial, holder, role, limits, expiry,
    /// revocation.
    List,
    /// Revoke a certificate by serial number, or every certificate of a holder by name:
    /// every node refuses it at the handshake and closes its live sessions within seconds.
    #[command(after_long_help = CERT_REVOKE_EXAMPLES)]
    Revoke {
        /// A serial number (hex, as `client certificate list` shows it) or a holder's name.
        #[arg(value_name = "NAME|SERIAL")]
        what: String,
    },
    /// Renew the certificate of the credentials in use (a gateway's, or a node's) from the
    /// node holding the cluster CA: a new key, the same identity and limits, and the CA
    /// certificate(s) the cluster trusts now. No CA key needed here.
    #[command(long_about = CERT_RENEW_ABOUT)]
    Renew(CertRenew),
}

const CERT_RENEW_ABOUT: &str = "\
Renew the certificate of the credentials this command connects with (--credentials, \
$CAIRN_CREDENTIALS or the default paths) from the node holding the cluster CA, over that \
authenticated connection: a new key made here, a certificate for the same holder, role and \
volume limits, and the CA certificate(s) the cluster trusts now (both during a CA \
rotation). Roles gateway and node only; a client's certificate is re-issued by an admin. \
The file is replaced atomically (0600); processes using it (Ganesha, smbd, tcmu-runner, \
mount.cairn) take it at their next connection. With --if-due only when the certificate \
ends within 30 days, or the cluster's CA certificates changed (a CA rotation): for a timer.";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct CertRenew {
    /// Only when due: within 30 days of its end, or the cluster trusts other CA
    /// certificates than the file does.
    #[arg(long)]
    pub if_due: bool,
    /// Write the renewed credential to FILE instead of replacing the one in use.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
}

const CERT_REVOKE_EXAMPLES: &str = "\
EXAMPLES:
  cairn client certificate revoke web1          every certificate issued to web1
  cairn client certificate revoke 5f0c2e...     one certificate, by serial
  cairn client certificate revoke node3         a removed peer's node certificate";

const CERT_ISSUE_ABOUT: &str = "\
Issue a credential (a certificate signed by the cluster CA, with a new private key) for a \
FUSE mount, a libcairn application, a gateway, another admin, or a node joining the \
cluster.

The certificate names its holder (NAME, the subject common name) and states its role and \
limits in a subject-alternative-name URI, e.g. `cairn:role=client;volumes=a,b;ro`. Every \
cairnd checks each request against it: a client may use only the volumes listed (all when \
--volumes is not given) and, with --read-only, change nothing (EROFS); management needs \
--role admin; gateways (--role gateway) may also read gateway documents with their secrets.

Runs locally on a node that holds the cluster CA (the first node of the cluster: \
ca.pem and ca.key in its state dir, or --ca-dir), as root: the CA key is readable by root \
only. The credential file (certificate, CA certificate, key; mode 0600) is what \
mount.cairn, libcairn and the gateways read from --credentials / CAIRN_CREDENTIALS / \
/etc/cairn/credentials.pem. Without --out it is printed on stdout.

The certificate is recorded in the cluster (serial, holder, role, limits, expiry) so that \
`cairn client certificate list` shows it and `cairn client certificate revoke` can revoke \
it; this needs a running cairnd and admin credentials (a warning says when the record \
failed: the certificate can still be revoked by its serial number).";

const CERT_ISSUE_EXAMPLES: &str = "\
EXAMPLES:
  cairn client certificate issue web1 --volumes www --out /tmp/web1.pem
  cairn client certificate issue backup --read-only --days 30 --out backup.pem
  cairn client certificate issue gw1 --role gateway --out /etc/cairn/credentials.pem
  scp /tmp/web1.pem web1:/etc/cairn/credentials.pem";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct CertIssue {
    /// Name of the holder (certificate subject), e.g. a host or application name.
    pub name: String,
    /// Role: client (data only), gateway (data, gateway documents), admin (everything),
    /// node (a cairnd joining the cluster).
    #[arg(long, value_enum, default_value_t = IssueRole::Client)]
    pub role: IssueRole,
    /// Only these volumes (comma separated; roles client and gateway); default: every volume.
    #[arg(long, value_name = "VOLUME,...", value_delimiter = ',')]
    pub volumes: Option<Vec<String>>,
    /// Read-only: the holder may read but not change volume data.
    #[arg(long)]
    pub read_only: bool,
    /// Days the certificate is valid.
    #[arg(long, value_name = "N", default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
    /// Write the credential to FILE (mode 0600) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Directory of the cluster CA (ca.pem, ca.key). Default: $CAIRN_CA_DIR, else the
    /// first of /var/lib/cairn and /etc/cairn (the appliance's) that holds ca.key.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<std::path::PathBuf>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueRole {
    Client,
    Gateway,
    Admin,
    Node,
}
