# shellcheck shell=bash
# Scenario appliance-join (make vm-test SCENARIO=appliance-join): a second appliance joins
# the first by user-data alone.
#
# Two guests boot from the appliance's qcow2 (make image IMAGE_PROFILE=debug, reused when
# its inputs did not change) from their own disks, joined by a private link (the second
# NIC, 192.168.78.0/24, configured by the user-data's bootcmd: the link has no DHCP):
#   a  all-in-one (the default role) with cairn.address on the link; its first boot makes
#      the cluster, vol0 and etcd, which serves the network over TLS (client certificates
#      of a's etcd CA only).
#   b  booted once a is up, with user-data naming a's etcd (https://192.168.78.11:2379),
#      a join token from `cairn peer token create --json` on a, its join address and CA
#      hash: role brick. Its first boot checks a's etcd answers, cairnd enrolls through a
#      (node certificate and etcd client certificate in the answer) and is a member.
# Then: b is in a's pool; b's etcd client certificate is CN cairn-node-b, signed by a's
# etcd CA, and opens a's etcd over the link, which refuses a client without one; b's etcd
# server and peer certificate (the same enrollment) names b's address; vol1
# (replica 2, a brick on each node) is created and started on a; a client mount on a writes, the files are on both bricks; a client mount on b (a credential for
# vol1 issued on a) reads them and writes one that a's mount reads; cairnd on a stopped,
# b's mount, mounted again, still reads every file (from b's brick).
# Progress and timings on stdout; docs/appliance.md ("Joining an appliance by user-data").
#
# Env: APPLIANCE_IMAGE_PREBUILT=1 boots build/image as it is (no make image).
# Run it under the machine's VM lock: flock /work/vm.lock make vm-test SCENARIO=appliance-join

# shellcheck source=tests/vm/appliance.sh
. "$VM_REPO/tests/vm/appliance.sh"
join_net=192.168.78

# join_in_pool NODE: a's pool lists NODE
join_in_pool() {
    vm_ssh a 'cairn --json pool list' | python3 -c '
import json, sys
sys.exit(0 if sys.argv[1] in [p.get("name") for p in json.load(sys.stdin)["peers"]] else 1)' "$1"
}

scenario_main() {
    local link t0 tok pin join b_cairn f
    appliance_vm_image

    # --- a: all-in-one, with its address on the link ------------------------------------
    appliance_vm_seed a 52:54:00:78:00:11 "$join_net.11" "cairn:
  node_name: node-a
  address: $join_net.11"
    link=$(free_port)
    t0=$SECONDS
    vm_boot a --disk "$APPLIANCE_QCOW2" --seed "$VM_DIR/seed-a.iso" --key "$VM_DIR/id_ed25519" --user debian \
        --mem 3072 --link listen "$link" --link-mac 52:54:00:78:00:11
    appliance_vm_first_boot a
    vm_step "a: all-in-one up in $((SECONDS - t0)) s; link: $(vm_ssh a "ip -br addr show to $join_net.0/24")"
    vm_ssh a 'cairn-appliance status' >"$VM_DIR/a-status.out" 2>&1 ||
        vm_fail "a: cairn-appliance status: $(cat "$VM_DIR/a-status.out")"
    grep -q "ETCD_LISTEN_CLIENT_URLS=https://0.0.0.0:2379" <(vm_ssh a 'cat /etc/cairn/etcd.env') ||
        vm_fail "a: etcd does not serve the network: $(vm_ssh a 'cat /etc/cairn/etcd.env')"
    # how to connect names cairn.address, not qemu's NAT address (the default route's)
    vm_ssh a 'cat /etc/motd' >"$VM_DIR/a-motd.out" 2>&1
    if ! grep -q "portal $join_net.11:3260" "$VM_DIR/a-motd.out" || ! grep -q "//$join_net.11/vol0" "$VM_DIR/a-motd.out"; then
        appliance_vm_fail "a: /etc/motd does not name cairn.address $join_net.11: $(cat "$VM_DIR/a-motd.out")"
    fi

    # --- a join token, as an operator would take it -------------------------------------
    vm_ssh a 'cairn --json peer token create --ttl 2h' >"$VM_DIR/token.json" ||
        vm_fail "a: cairn peer token create: $(cat "$VM_DIR/token.json")"
    read -r tok pin join < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["token"], d["ca_cert_hash"], d["join"])' "$VM_DIR/token.json") ||
        vm_fail "peer token create --json: $(cat "$VM_DIR/token.json")"
    [[ $join == "$join_net.11:7420" ]] || vm_fail "the token's join address is $join, not a's link address"
    vm_step "join token ${tok%%.*}, join $join, CA $pin"

    # --- b: brick node, joining a by user-data alone -------------------------------------
    b_cairn="cairn:
  role: brick
  node_name: node-b
  address: $join_net.12
  cluster:
    etcd: [https://$join_net.11:2379]
    token: \"$tok\"
    join: $join
    ca_cert_hash: $pin"
    appliance_vm_seed b 52:54:00:78:00:12 "$join_net.12" "$b_cairn"
    t0=$SECONDS
    vm_boot b --disk "$APPLIANCE_QCOW2" --seed "$VM_DIR/seed-b.iso" --key "$VM_DIR/id_ed25519" --user debian \
        --mem 2048 --link connect "$link" --link-mac 52:54:00:78:00:12
    appliance_vm_first_boot b
    vm_step "b: brick node up in $((SECONDS - t0)) s"
    vm_ssh b 'cairn-appliance status' >"$VM_DIR/b-status.out" 2>&1 ||
        appliance_vm_fail "b: cairn-appliance status: $(cat "$VM_DIR/b-status.out")"
    printf '    %s\n' "$(sed 's/^/    /' "$VM_DIR/b-status.out")"
    join_in_pool node-b || appliance_vm_fail "node-b is not in a's pool: $(vm_ssh a 'cairn pool list')"
    vm_ssh b 'test -s /var/lib/cairn/node/node.pem' ||
        appliance_vm_fail "b: no node certificate after joining"
    [[ $(vm_ssh b "openssl x509 -in /etc/cairn/etcd-client/client.pem -noout -subject -nameopt RFC2253") == "subject=CN=cairn-node-b" ]] ||
        appliance_vm_fail "b: its etcd client certificate is not CN cairn-node-b"
    vm_ssh a 'cat /etc/cairn/etcd-ca/ca.pem' >"$VM_DIR/etcd-ca.pem"
    vm_ssh b 'cat /etc/cairn/etcd-client/client.pem' >"$VM_DIR/b-etcd-client.pem"
    openssl verify -CAfile "$VM_DIR/etcd-ca.pem" "$VM_DIR/b-etcd-client.pem" >/dev/null ||
        appliance_vm_fail "b's etcd client certificate is not signed by a's etcd CA"
    vm_ssh b 'test ! -e /etc/cairn/etcd-ca' || appliance_vm_fail "b has an etcd CA dir"
    # a's etcd over the link: b's own certificate opens it, no certificate does not
    f=/etc/cairn/etcd-client
    [[ $(vm_ssh b "curl -s --max-time 20 --cacert $f/ca.pem --cert $f/client.pem --key $f/client-key.pem https://$join_net.11:2379/health") == *'"health":"true"'* ]] ||
        appliance_vm_fail "b cannot read a's etcd with its own certificate"
    if vm_ssh b "curl -s --max-time 20 --cacert $f/ca.pem https://$join_net.11:2379/health" >"$VM_DIR/nocert.out" 2>&1; then
        appliance_vm_fail "a's etcd answered b without a client certificate: $(cat "$VM_DIR/nocert.out")"
    fi
    vm_step "ok: b joined by user-data: in a's pool, node certificate, etcd client certificate CN cairn-node-b of a's etcd CA"
    # b's etcd server and peer certificate (same enrollment): for b's address, of a's etcd
    # CA, installed for etcd (root:etcd, the key 0640) so that b can be made a member
    f=/etc/cairn/etcd-server
    vm_ssh b "cat $f/server.pem" >"$VM_DIR/b-etcd-member.pem" 2>&1 ||
        appliance_vm_fail "b: no etcd member certificate in $f: $(cat "$VM_DIR/b-etcd-member.pem")"
    openssl verify -purpose sslserver -CAfile "$VM_DIR/etcd-ca.pem" "$VM_DIR/b-etcd-member.pem" >/dev/null ||
        appliance_vm_fail "b's etcd member certificate is not a server certificate of a's etcd CA"
    [[ $(openssl x509 -in "$VM_DIR/b-etcd-member.pem" -noout -ext subjectAltName) == *"IP Address:$join_net.12"* ]] ||
        appliance_vm_fail "b's etcd member certificate does not name $join_net.12"
    [[ $(vm_ssh b "stat -c '%a %U:%G' $f/server-key.pem") == "640 root:etcd" ]] ||
        appliance_vm_fail "b's etcd member key: $(vm_ssh b "ls -l $f")"
    vm_step "ok: b's etcd server and peer certificate names $join_net.12, of a's etcd CA, in $f"

    # --- b's bricks in a volume -----------------------------------------------------------
    vm_ssh b 'mkdir -p /srv/cairn/disk0/bricks/vol1' || appliance_vm_fail "b: brick dir"
    vm_ssh a 'mkdir -p /srv/cairn/disk0/bricks/vol1 &&
        cairn volume create vol1 replica 2 node-a:/srv/cairn/disk0/bricks/vol1 node-b:/srv/cairn/disk0/bricks/vol1 force &&
        cairn volume start vol1' >"$VM_DIR/vol1.out" 2>&1 ||
        appliance_vm_fail "a: cairn volume create/start vol1 over a and b: $(cat "$VM_DIR/vol1.out")"
    vm_ssh a 'cairn volume info vol1' | sed 's/^/    /'
    vm_ssh a 'systemctl start cairn-mount@vol1 && mountpoint -q /srv/cairn/mnt/vol1' >"$VM_DIR/mount-a.out" 2>&1 ||
        appliance_vm_fail "a: mount of vol1: $(cat "$VM_DIR/mount-a.out")"
    vm_ssh a "for i in 1 2 3 4 5 6; do echo \"join \$i $$\" >/srv/cairn/mnt/vol1/f\$i.txt || exit 1; done; sync" ||
        appliance_vm_fail "a: writing through its mount of vol1"
    for g in a b; do
        for i in 1 2 3 4 5 6; do
            [[ $(vm_ssh "$g" "find /srv/cairn/disk0/bricks/vol1 -name f$i.txt -type f | head -n1 | xargs -r cat") == "join $i $$" ]] ||
                appliance_vm_fail "f$i.txt is not on $g's brick of vol1"
        done
    done
    vm_step "ok: vol1 (replica 2 over node-a and node-b) written through a's mount; every file on both bricks"

    # --- a client on b ------------------------------------------------------------------
    # the appliance's cluster CA is in /etc/cairn (cairnd --ca-dir), not the CLI's default
    vm_ssh a 'cairn client certificate issue node-b-mount --volumes vol1 --ca-dir /etc/cairn --out /root/node-b-mount.pem' \
        >"$VM_DIR/cred.out" 2>&1 || appliance_vm_fail "a: client certificate issue: $(cat "$VM_DIR/cred.out")"
    vm_ssh a 'cat /root/node-b-mount.pem' | vm_ssh b 'umask 077 && cat >/etc/cairn/credentials.pem' ||
        appliance_vm_fail "b: installing its mount credential"
    vm_ssh b 'systemctl start cairn-mount@vol1 && mountpoint -q /srv/cairn/mnt/vol1' >"$VM_DIR/mount-b.out" 2>&1 ||
        appliance_vm_fail "b: mount of vol1: $(cat "$VM_DIR/mount-b.out")"
    for i in 1 2 3 4 5 6; do
        [[ $(vm_ssh b "cat /srv/cairn/mnt/vol1/f$i.txt") == "join $i $$" ]] || appliance_vm_fail "b's mount reads f$i.txt wrong"
    done
    vm_ssh b "echo 'from b $$' >/srv/cairn/mnt/vol1/from-b.txt && sync" || appliance_vm_fail "b: write through its mount"
    [[ $(vm_ssh a 'cat /srv/cairn/mnt/vol1/from-b.txt') == "from b $$" ]] || appliance_vm_fail "a's mount does not read b's file"
    vm_step "ok: a client mount on b reads a's files and writes one that a's mount reads"

    # --- reads from b's brick alone -----------------------------------------------------
    # a fresh mount on b (nothing cached): every read comes from b's brick
    vm_ssh a 'systemctl stop cairnd' || appliance_vm_fail "a: stop cairnd"
    vm_ssh b 'systemctl restart cairn-mount@vol1 && mountpoint -q /srv/cairn/mnt/vol1' >"$VM_DIR/remount-b.out" 2>&1 ||
        appliance_vm_fail "b: remount of vol1 with a's cairnd stopped: $(cat "$VM_DIR/remount-b.out")"
    for i in 1 2 3 4 5 6; do
        [[ $(vm_ssh b "timeout 120 cat /srv/cairn/mnt/vol1/f$i.txt") == "join $i $$" ]] ||
            appliance_vm_fail "b's mount cannot read f$i.txt with a's cairnd stopped"
    done
    vm_ssh a 'systemctl start cairnd' || appliance_vm_fail "a: start cairnd"
    vm_step "ok: with a's cairnd stopped, b's mount reads every file from b's brick"
}
