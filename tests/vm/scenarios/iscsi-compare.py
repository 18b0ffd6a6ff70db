#!/usr/bin/env python3
"""Compare iscsi-test-cu results of the user:cairn LUN with the kernel fileio LUN.

usage: iscsi-compare.py CU_LOG_DIR EXCEPTIONS_FILE

CU_LOG_DIR holds cairn-SUITE.log and fileio-SUITE.log (iscsi-test-cu -v output). A test
counts as skipped when libiscsi printed "[SKIPPED]" for it (iscsi-test-cu reports those as
passed). Exit 1 when a test passes on fileio but not on user:cairn and the exceptions file
(lines "TEST  reason") does not list it, or when a suite produced no results at all. The
exceptions are checked too: an entry without a reason, or one that no longer applies (the
test passes on user:cairn, or does not pass on fileio), also fails the comparison, so the
list stays true.
"""
import pathlib
import re
import sys

TEST = re.compile(r"^\s*Test: (\S+) \.\.\.")
SUITE = re.compile(r"^Suite: (\S+)")


def parse(path):
    """{suite.test: 'passed'|'failed'|'skipped'} from one iscsi-test-cu -v log."""
    res, suite, cur, skipped = {}, "?", None, False
    for line in path.read_text(errors="replace").splitlines():
        m = SUITE.match(line)
        if m:
            suite = m.group(1)
            continue
        m = TEST.match(line)
        if m:
            cur, skipped = f"{suite}.{m.group(1)}", False
            line = line[m.end():]
        if cur is None:
            continue
        if "[SKIPPED]" in line or "SKIPPED" in line:
            skipped = True
        if re.search(r"\bpassed\b", line):
            res[cur] = "skipped" if skipped else "passed"
            cur = None
        elif re.search(r"\bFAILED\b", line):
            res[cur] = "failed"
            cur = None
    return res


def same_test(a, b):
    """CUnit prints "Suite: Inquiry" or "Suite: SCSI.Inquiry" depending on the libiscsi
    version: names match when one ends with the other on a '.' boundary."""
    return a == b or a.endswith("." + b) or b.endswith("." + a)


def main():
    logdir, exfile = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    exceptions = {}  # name -> reason
    for line in exfile.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, why = line.partition(" ")
            exceptions[name] = why.strip()
    bad, empty, stale, used = [], [], [], set()
    for name, why in exceptions.items():
        if not why:
            stale.append(f"{name} (no reason given)")
    totals = {lun: {"passed": 0, "failed": 0, "skipped": 0} for lun in ("cairn", "fileio")}
    rows = []
    for flog in sorted(logdir.glob("fileio-*.log")):
        suite = flog.name[len("fileio-"):-len(".log")]
        clog = logdir / f"cairn-{suite}.log"
        f = parse(flog)
        c = parse(clog) if clog.exists() else {}
        if not f or not c:
            empty.append(suite)
        for name in sorted(set(f) | set(c)):
            fr, cr = f.get(name, "missing"), c.get(name, "missing")
            for lun, r in (("fileio", fr), ("cairn", cr)):
                if r in totals[lun]:
                    totals[lun][r] += 1
            note = ""
            ex = next((e for e in exceptions if same_test(e, name)), None)
            if ex:
                used.add(ex)
            if fr == "passed" and cr != "passed":
                if ex:
                    note = f"exception: {exceptions[ex][:60]}..."
                else:
                    note = "REGRESSION"
                    bad.append(name)
            elif ex:
                stale.append(f"{name} (fileio {fr}, cairn {cr})")
                note = "STALE EXCEPTION"
            rows.append((name, fr, cr, note))
    w = max((len(r[0]) for r in rows), default=10)
    print(f"{'test':<{w}}  {'fileio':<8} {'cairn':<8} note")
    for name, fr, cr, note in rows:
        print(f"{name:<{w}}  {fr:<8} {cr:<8} {note}")
    for lun in ("fileio", "cairn"):
        t = totals[lun]
        print(f"{lun}: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped")
    if empty:
        print(f"suites without results (target unreachable?): {' '.join(empty)}")
    # an exception for a suite that ran but has no such test: a typo or a renamed test
    ran = {r[0].rsplit(".", 1)[0] for r in rows}
    for name in exceptions:
        if name not in used and any(same_test(name.rsplit(".", 1)[0], s) for s in ran):
            stale.append(f"{name} (no such test in the logs)")
    if bad:
        print(f"pass on fileio but not on user:cairn: {' '.join(bad)}")
    if stale:
        print(f"exceptions to fix in the exceptions file: {'; '.join(stale)}")
    return 1 if bad or empty or stale else 0


if __name__ == "__main__":
    sys.exit(main())
