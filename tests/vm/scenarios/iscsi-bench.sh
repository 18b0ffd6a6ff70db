# shellcheck shell=bash
# Scenario iscsi-bench (make vm-test SCENARIO=iscsi-bench): the iscsi scenario's setup (guest
# g1 with LIO exporting a user:cairn LUN on the host's 2x2 volume lunvol and a kernel
# fileio LUN on the guest's own disk, same size), then, inside the guest, open-iscsi logs
# in to both over 127.0.0.1 and fio runs the same jobs on both disks in the same run:
# 4 KiB random read and write (queue depth 16) and 1 MiB sequential write and read (queue
# depth 4), libaio, O_DIRECT, time-based. Prints a table with the user:cairn / fileio ratio
# and saves it as tests/bench/results/<date>-iscsi-vm.md (raw JSON lines next to it).
# Not a test: it fails only if a job fails. Under TCG everything is slow; compare ratios.
# Env: BENCH_SECONDS (per job, default 10), BENCH_LUN_MIB (default 256),
#      BENCH_RESULTS (default tests/bench/results), BENCH_SAVE=0 (do not save)

# shellcheck source=tests/vm/scenarios/iscsi.sh
. "$VM_REPO/tests/vm/scenarios/iscsi.sh"

scenario_main() {
    local secs=${BENCH_SECONDS:-10} mib=${BENCH_LUN_MIB:-256} port out
    local results=${BENCH_RESULTS:-$VM_REPO/tests/bench/results} stamp
    iscsi_setup "$mib"
    vm_step "fio in the guest: 4 jobs x 2 LUNs x ${secs} s"
    out=$VM_DIR/bench.jsonl
    vm_ssh g1 "bash /mnt/cairn/iscsi-bench-guest.sh $secs $IQN_CAIRN $IQN_FILEIO" \
        >"$out" 2>"$VM_DIR/g1/bench.log" || {
        cat "$VM_DIR/g1/bench.log" >&2
        vm_fail "fio in the guest (log $VM_DIR/g1/bench.log)"
    }
    stamp=$(date +%Y-%m-%d)
    python3 - "$out" "$secs" "$mib" >"$VM_DIR/bench.md" <<'PY' || vm_fail "bench report"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
secs, mib = sys.argv[2], sys.argv[3]
by = {(r["lun"], r["job"]): r for r in rows}
print(f"# iSCSI in the VM: user:cairn vs kernel fileio\n")
print(f"Guest under qemu TCG (2 vCPU), open-iscsi to the guest's own LIO over 127.0.0.1;")
print(f"user:cairn = tcmu-runner + handler_cairn -> libcairn -> qemu user-mode net -> 2 cairnd")
print(f"on the host (2x2 volume, bricks on the host disk); fileio = LIO fileio on the guest's")
print(f"qcow2 disk. {mib} MiB LUNs, fio libaio O_DIRECT, {secs} s per job. Compare ratios.\n")
print("| job | fileio | user:cairn | cairn / fileio |")
print("|---|---:|---:|---:|")
fail = False
for job in ("randread-4k", "randwrite-4k", "seqwrite-1m", "seqread-1m"):
    f, c = by.get(("fileio", job)), by.get(("cairn", job))
    if not f or not c or f["errors"] or c["errors"]:
        fail = True
        print(f"| {job} | {f} | {c} | job failed |")
        continue
    if job.endswith("4k"):
        fv, cv, unit = f["iops"], c["iops"], "IOPS"
        fs, cs = f"{fv:.0f} {unit}", f"{cv:.0f} {unit}"
    else:
        fv, cv = f["bw_bytes"] / 2**20, c["bw_bytes"] / 2**20
        fs, cs = f"{fv:.1f} MiB/s", f"{cv:.1f} MiB/s"
    ratio = cv / fv if fv else float("nan")
    print(f"| {job} | {fs} ({f['lat_us']:.0f} us) | {cs} ({c['lat_us']:.0f} us) | {ratio:.2f} |")
sys.exit(1 if fail else 0)
PY
    cat "$VM_DIR/bench.md"
    if [[ ${BENCH_SAVE:-1} == 1 ]]; then
        mkdir -p "$results"
        cp "$VM_DIR/bench.md" "$results/$stamp-iscsi-vm.md"
        cp "$out" "$results/$stamp-iscsi-vm.jsonl"
        vm_step "saved $results/$stamp-iscsi-vm.md"
    fi
}
