# shellcheck shell=bash
# Scenario deploy (make vm-test SCENARIO=deploy): ansible/site.yml against real hosts.
#
# Two plain Debian 12 guests (the harness image plus the packages site.yml installs,
# tests/vm/packages-deploy.txt, baked in at native speed), joined by a private link
# (eth1, 192.168.77.0/24): guest a is the etcd member, a brick node and the gateway; guest
# b is a brick node. From the host, ansible-playbook runs ansible/site.yml over SSH with an
# inventory written here and the dist tarball of the debug build (stripped, so that the
# guests unpack ~20 MB instead of ~80). Then, as a user would: vol0 exists with replica 2
# over a brick on each guest; an NFSv4.1 client (nfs-rs) on the host writes through a's
# forwarded port and the file is on both bricks; smbclient puts and gets through a's SMB
# share as the inventory's user; guest a's kernel NFS client, as root (squashed), creates
# and appends in vol0's root. etcd runs over TLS: it refuses plain HTTP and a client without
# a certificate, each node has its own etcd client certificate, the CTDB lock helper works
# over TLS, and the gateway daemons run with a's own gateway certificate (vol0 only). Last,
# site.yml runs again and its PLAY RECAP must say changed=0 for every host. Progress and timings on stdout; docs/appliance.md ("Tests").
#
# Env: DEPLOY_KEEP_TARBALL=PATH (use that dist tarball instead of packing one).
# Run it under the machine's VM lock: flock /work/vm.lock make vm-test SCENARIO=deploy

export VM_PACKAGES_EXTRA=$VM_REPO/tests/vm/packages-deploy.txt

deploy_net=192.168.77
deploy_smb_pw=deploy-$$-pw

# The dist tarball of CAIRN_BIN_DIR (make vm-test: the debug build), its four binaries
# stripped of debug info first.
deploy_dist() {
    local bin=${CAIRN_BIN_DIR:-$VM_REPO/backend/target/debug} stage=$VM_DIR/dist-target f
    [[ -n ${DEPLOY_KEEP_TARBALL:-} ]] && {
        cp "$DEPLOY_KEEP_TARBALL" "$VM_DIR/cairn-dist.tar.gz"
        return
    }
    mkdir -p "$stage"
    for f in cairnd cairn mount-cairn libcairn.so; do
        [[ -f $bin/$f ]] || vm_fail "$bin/$f is missing (make build-test, or CAIRN_BIN_DIR=...)"
        strip --strip-debug -o "$stage/$f" "$bin/$f" || vm_fail "strip $bin/$f"
    done
    [[ ! -d $bin/include ]] || cp -r "$bin/include" "$stage/"
    "$VM_REPO/scripts/dist.sh" "$stage" "$VM_DIR/cairn-dist.tar.gz" >"$VM_DIR/dist.log" 2>&1 ||
        vm_fail "make dist: $(tail -n 20 "$VM_DIR/dist.log")"
}

deploy_inventory() {
    cat >"$VM_DIR/inventory.yml" <<EOF
---
all:
  vars:
    ansible_user: root
    ansible_host: 127.0.0.1
    ansible_ssh_private_key_file: $VM_IMAGE/id_ed25519
    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=60 -o ServerAliveInterval=10 -o ServerAliveCountMax=30
    cairn_dist_tarball: $VM_DIR/cairn-dist.tar.gz
    cairn_volumes:
      - name: vol0
        replica: 2
        mode: "1777"
        owner: "65534:65534"
        bricks:
          - node-a:/srv/cairn/disk0/bricks/vol0
          - node-b:/srv/cairn/disk0/bricks/vol0
    cairn_nfs_exports:
      - {volume: vol0, path: /vol0, clients: "*"}
    cairn_smb_shares:
      - {name: vol0, volume: vol0}
    cairn_smb_users:
      - {name: alice, password: "$deploy_smb_pw"}
  hosts:
    node-a: {ansible_port: $(vm_port a 22), cairn_address: $deploy_net.11}
    node-b: {ansible_port: $(vm_port b 22), cairn_address: $deploy_net.12}
  children:
    etcd:
      hosts:
        node-a:
    bricks:
      hosts:
        node-a:
        node-b:
    gateways:
      hosts:
        node-a:
EOF
}

# deploy_run N: ansible-playbook site.yml; output in site-N.log; sets deploy_recap to the
# PLAY RECAP lines
# On a failed run: each guest's journal of the Cairn and etcd units, kept in its log dir
# (copied to build/vm-logs/), and the last lines of cairnd's on stderr.
deploy_journals() {
    local g
    for g in a b; do
        vm_ssh "$g" "journalctl -b --no-pager -u 'cairn*' -u etcd -u smbd -u nfs-ganesha" \
            >"$VM_DIR/$g/journal.log" 2>&1 || true
        printf '%s: journalctl -u cairnd (last 15 lines)\n' "$g" >&2
        grep -E 'cairnd' "$VM_DIR/$g/journal.log" | tail -n 15 >&2 || true
    done
}

deploy_run() {
    local n=$1 t0=$SECONDS rc=0
    vm_step "ansible-playbook site.yml, run $n"
    ANSIBLE_CONFIG=$VM_REPO/ansible/ansible.cfg ANSIBLE_HOST_KEY_CHECKING=False \
        ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 ANSIBLE_TIMEOUT=60 \
        ansible-playbook -i "$VM_DIR/inventory.yml" "$VM_REPO/ansible/site.yml" \
        >"$VM_DIR/site-$n.log" 2>&1 || rc=$?
    deploy_recap=$(sed -n '/^PLAY RECAP/,$p' "$VM_DIR/site-$n.log" | grep -E '^node-' || true)
    vm_step "site.yml run $n: exit $rc in $((SECONDS - t0)) s"
    printf '    %s\n' "$deploy_recap"
    ((rc == 0)) || {
        grep -E -B2 -A12 '^(fatal|failed):' "$VM_DIR/site-$n.log" | tail -n 60 >&2
        deploy_journals
        vm_fail "site.yml run $n failed (log: $VM_DIR/site-$n.log)"
    }
}

scenario_main() {
    local link t_boot t_first t_second
    command -v ansible-playbook >/dev/null || vm_fail "ansible-playbook missing (apt-get install ansible-core)"
    command -v smbclient >/dev/null || vm_fail "smbclient missing (apt-get install smbclient)"
    local venv=${NFS_VENV:-$VM_REPO/build/nfs-venv}
    if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import nfs_rs' 2>/dev/null; then
        { python3 -m venv "$venv" >/dev/null && "$venv/bin/pip" install -q nfs-rs; } ||
            vm_fail "cannot make the nfs-rs venv $venv"
    fi

    vm_step "dist tarball of the debug build (stripped)"
    deploy_dist
    vm_step "dist: $(du -h "$VM_DIR/cairn-dist.tar.gz" | cut -f1)"
    vm_image

    t_boot=$SECONDS
    link=$(free_port)
    vm_boot a --fwd 2049 --fwd 445 --link listen "$link" --mem 2048
    vm_boot b --link connect "$link" --mem 1536
    vm_wait a
    vm_wait b
    local g i=11
    for g in a b; do
        # the private link, as a host's second NIC would be configured
        vm_ssh "$g" "printf '[Match]\nName=eth1\n\n[Network]\nAddress=$deploy_net.$i/24\n' \
            >/etc/systemd/network/05-eth1.network && ip link set eth1 up &&
            ip addr replace $deploy_net.$i/24 dev eth1 && networkctl reload &&
            hostnamectl set-hostname node-$g" ||
            vm_fail "$g: network setup"
        i=$((i + 1))
    done
    # (no ping in the image: b's sshd answers over the link)
    vm_ssh a "for i in \$(seq 30); do timeout 3 bash -c '</dev/tcp/$deploy_net.12/22' 2>/dev/null && exit 0; sleep 1; done; exit 1" ||
        vm_fail "a cannot reach b over the private link: $(vm_ssh a 'ip addr; networkctl' 2>&1)"
    t_boot=$((SECONDS - t_boot))
    vm_step "guests up and linked in $t_boot s"

    deploy_inventory
    t_first=$SECONDS
    deploy_run 1
    t_first=$((SECONDS - t_first))

    # --- as a user would --------------------------------------------------------------
    vm_step "checks: volume, NFS, SMB"
    local info
    info=$(vm_ssh a /usr/local/bin/cairn --json volume info vol0) || vm_fail "cairn volume info vol0 on a"
    python3 - "$info" <<'PY' || vm_fail "vol0 is not replica 2 over node-a and node-b: $info"
import json, sys
d = json.loads(sys.argv[1])
v = d["volumes"][0] if "volumes" in d else d
bricks = [b for s in v["sets"] for b in s["bricks"]]
assert v["replica"] == 2 and len(v["sets"]) == 1, v
assert sorted(b["node"] for b in bricks) == ["node-a", "node-b"], bricks
assert all(b["state"] == "up" for b in bricks), bricks
assert v["status"] == "Started", v
PY
    for g in a b; do
        [[ $(vm_ssh "$g" stat -c %a:%u:%g /srv/cairn/disk0/bricks/vol0/data) == 1777:65534:65534 ]] ||
            vm_fail "vol0's root is not 1777 and 65534's (the inventory's mode and owner) on $g's brick"
    done
    vm_step "ok: vol0 is started, replica 2 over node-a and node-b (both up), its root 1777 and 65534's"

    # --- etcd over TLS (docs/security.md, "etcd") ------------------------------------------
    vm_step "checks: etcd over TLS with client certificates, per-node and per-gateway certificates"
    local e=https://$deploy_net.11:2379 range='{"key":"L2NhaXJu","range_end":"L2NhaXJv"}' out
    vm_ssh b "curl -sS --max-time 5 http://$deploy_net.11:2379/health" >"$VM_DIR/etcd-plain.out" 2>&1 &&
        vm_fail "etcd answered plain HTTP: $(cat "$VM_DIR/etcd-plain.out")"
    vm_ssh a "curl -sS --max-time 5 http://127.0.0.1:2379/health" >"$VM_DIR/etcd-plain.out" 2>&1 &&
        vm_fail "etcd answered plain HTTP on 127.0.0.1: $(cat "$VM_DIR/etcd-plain.out")"
    vm_ssh b "curl -fsS --max-time 5 --cacert /etc/cairn/etcd-client/ca.pem -X POST -d '$range' $e/v3/kv/range" \
        >"$VM_DIR/etcd-nocert.out" 2>&1 &&
        vm_fail "etcd served a client without a certificate: $(head -c 300 "$VM_DIR/etcd-nocert.out")"
    out=$(vm_ssh b "curl -fsS --max-time 5 --cacert /etc/cairn/etcd-client/ca.pem \
        --cert /etc/cairn/etcd-client/client.pem --key /etc/cairn/etcd-client/client-key.pem \
        -X POST -d '$range' $e/v3/kv/range") || vm_fail "b's etcd client certificate was refused: $out"
    grep -q '"count"' <<<"$out" || vm_fail "b read nothing from etcd with its certificate: $out"
    grep -q 'https://' <<<"$(vm_ssh b cat /etc/cairn/appliance.env)" || vm_fail "b's cairnd does not use https for etcd"
    [[ $(vm_ssh a stat -c %a:%U:%G /etc/cairn/etcd-server/server-key.pem) == 640:root:etcd ]] ||
        vm_fail "etcd's key is not 0640 root:etcd"
    for g in a b; do
        [[ $(vm_ssh "$g" stat -c %a:%U /etc/cairn/etcd-client/client-key.pem /etc/cairn/etcd-client) == $'600:root\n700:root' ]] ||
            vm_fail "$g's etcd client key or its directory is not root's, 0600/0700"
        vm_ssh "$g" "openssl x509 -noout -subject -in /etc/cairn/etcd-client/client.pem" | grep -q "CN = cairn-node-$g" ||
            vm_fail "$g's etcd client certificate is not its own (CN cairn-node-$g)"
    done
    vm_ssh b "test ! -e /etc/cairn/etcd-ca" || vm_fail "the etcd CA is on b (only bricks[0] keeps it)"
    vm_ssh b "journalctl -b --no-pager -u 'cairn*' -u etcd" | grep -q 'BEGIN .*PRIVATE KEY' &&
        vm_fail "a private key is in b's journal"
    vm_ssh a "journalctl -b --no-pager -u 'cairn*' -u etcd" | grep -q 'BEGIN .*PRIVATE KEY' &&
        vm_fail "a private key is in a's journal"
    grep -q 'BEGIN .*PRIVATE KEY' "$VM_DIR/site-1.log" && vm_fail "a private key is in the ansible log"
    # the CTDB cluster lock helper over TLS, with the node's etcd identity (appliance.env)
    vm_ssh b "cat >/tmp/ctdb-etcd-reclock && chmod 0755 /tmp/ctdb-etcd-reclock" <"$VM_REPO/appliance/ha/ctdb-etcd-reclock" ||
        vm_fail "copying ctdb-etcd-reclock to b"
    out=$(vm_ssh b "timeout 8 /tmp/ctdb-etcd-reclock $e /cairn/ha/ctdb/deploy-test 3 2>&1; true")
    [[ $out == 0* ]] || vm_fail "ctdb-etcd-reclock over TLS with b's etcd identity: '$out' (want '0', the lock taken)"
    # the gateway's own certificate: role gateway, vol0 only; Ganesha and smbd run with it
    [[ $(vm_ssh a stat -c %a:%U /etc/cairn/gateway.pem) == 600:root ]] || vm_fail "a's gateway.pem is not 0600 root's"
    out=$(vm_ssh a /usr/local/bin/cairn --json client certificate list) || vm_fail "cairn client certificate list: $out"
    python3 - "$out" <<'PY' || vm_fail "no gateway certificate node-a limited to vol0 is recorded: $out"
import json, sys
d = json.loads(sys.argv[1])
certs = d["certificates"] if isinstance(d, dict) else d
assert any(c.get("name") == "node-a" and c.get("role") == "gateway" and c.get("volumes") == ["vol0"]
           and not c.get("revoked_at") for c in certs), certs
PY
    for unit in cairn-nfs smbd; do
        vm_ssh a "tr '\\0' '\\n' </proc/\$(systemctl show -p MainPID --value $unit)/environ" |
            grep -qx 'CAIRN_CREDENTIALS=/etc/cairn/gateway.pem' || vm_fail "$unit does not run with the gateway's certificate"
    done
    vm_step "ok: etcd refuses plain HTTP and a client without a certificate; nodes use their own etcd certificates (keys 0600, CA on node-a only); ctdb-etcd-reclock works over TLS; Ganesha and smbd use a's gateway certificate (vol0 only)"

    local nfs_port smb_port
    nfs_port=$(vm_port a 2049)
    smb_port=$(vm_port a 445)
    nfs41() { "$venv/bin/python" "$VM_REPO/tests/nfs/nfsclient.py" --port "$nfs_port" --version 4.1 --export /vol0 "$@"; }
    local ok=
    for _ in $(seq 40); do # nfs-rs does not retry NFS4ERR_GRACE
        if nfs41 write /deploy.txt "deployed $$" 2>"$VM_DIR/nfs41.err"; then
            ok=1
            break
        fi
        sleep 3
    done
    [[ -n $ok ]] || vm_fail "NFSv4.1 write through a: $(cat "$VM_DIR/nfs41.err")"
    [[ $(nfs41 read /deploy.txt) == "deployed $$" ]] || vm_fail "NFSv4.1 read back through a"
    for g in a b; do
        [[ $(vm_ssh "$g" "find /srv/cairn/disk0/bricks/vol0 -name deploy.txt -type f | head -n1 | xargs -r cat") == "deployed $$" ]] ||
            vm_fail "the NFS file is not on $g's brick"
    done
    vm_step "ok: NFSv4.1 (nfs-rs) write and read through a's gateway; the file is on both bricks"

    echo "smb put $$" >"$VM_DIR/smb.txt"
    smbclient //127.0.0.1/vol0 -p "$smb_port" -U "alice%$deploy_smb_pw" -m SMB3 \
        -c "put $VM_DIR/smb.txt smb.txt; get deploy.txt $VM_DIR/smb-get.txt" >"$VM_DIR/smbclient.out" 2>&1 ||
        vm_fail "smbclient put/get as alice: $(cat "$VM_DIR/smbclient.out")"
    [[ $(cat "$VM_DIR/smb-get.txt") == "deployed $$" ]] || vm_fail "SMB get of the NFS file"
    [[ $(nfs41 read /smb.txt) == "smb put $$" ]] || vm_fail "the SMB file is not seen over NFS"
    vm_step "ok: SMB put/get as alice through a's share; NFS sees the SMB file"

    # a root-squashed Linux client (fs.protected_regular=2, Debian's default) creates and
    # appends in the sticky root: it can because the root is 65534's (docs/appliance.md)
    vm_ssh a "mkdir -p /mnt/k && mount -t nfs -o vers=4.2 127.0.0.1:/vol0 /mnt/k &&
        echo one >/mnt/k/kroot.txt && echo two >>/mnt/k/kroot.txt && cat /mnt/k/kroot.txt; rc=\$?;
        umount /mnt/k; exit \$rc" >"$VM_DIR/kernel-nfs.out" 2>&1 ||
        vm_fail "a's kernel NFS client (root, squashed) could not create and append: $(cat "$VM_DIR/kernel-nfs.out")"
    [[ $(tr '\n' ' ' <"$VM_DIR/kernel-nfs.out") == "one two " ]] ||
        vm_fail "kernel NFS client read back: $(cat "$VM_DIR/kernel-nfs.out")"
    vm_step "ok: a root-squashed kernel NFSv4.2 client creates and appends in vol0's root"

    # --- idempotency --------------------------------------------------------------------
    t_second=$SECONDS
    deploy_run 2
    t_second=$((SECONDS - t_second))
    local bad
    bad=$(grep -Ev 'changed=0 .*failed=0 ' <<<"$deploy_recap" || true)
    [[ -z $bad && $(grep -c . <<<"$deploy_recap") == 2 ]] || {
        grep -E '^changed:' -B1 "$VM_DIR/site-2.log" >&2 || true
        vm_fail "the second site.yml run changed something: $bad"
    }
    vm_step "ok: the second run reports changed=0 on both hosts"
    vm_step "timings: guests up in $t_boot s, first site.yml run $t_first s, second run $t_second s"
}
