#!/usr/bin/env bash
# tests/nfs/protocol.sh with NFSv4 ACLs on for the export (FSAL { ACL = true; }): every
# v4.1 READDIR of nfs-rs asks for `acl`, so the 10 000-entry listing carries each entry's
# ACL (a getxattr per entry), and the late-entry checks run after such a listing.
set -euo pipefail
NFS_ACL=1 exec bash "$(dirname "${BASH_SOURCE[0]}")/protocol.sh"
