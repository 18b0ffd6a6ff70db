#!/usr/bin/env python3
"""A stand-in for targetcli-fb on a machine without LIO (tests/iscsi/luns.sh): keeps the
`user:cairn` storage objects of one "gateway" in the saveconfig JSON file $FAKE_LIO and
understands the commands `cairn iscsi sync` sends for them (create, ALUA group, delete,
saveconfig). Other commands (preferences, targets) are accepted and ignored; an unknown
storage-object command is an error, so a plan this fake does not follow shows."""
import json
import os
import sys

state_file = os.environ["FAKE_LIO"]


def load():
    try:
        with open(state_file) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"storage_objects": [], "targets": []}


def save(state, path):
    with open(path, "w") as f:
        json.dump(state, f)


state = load()
if len(sys.argv) > 1:  # targetcli 'saveconfig savefile=F'
    cmd = " ".join(sys.argv[1:])
    if not cmd.startswith("saveconfig savefile="):
        sys.exit(f"fake targetcli: unexpected command {cmd!r}")
    save(state, cmd.split("=", 1)[1])
    sys.exit(0)
sos = state["storage_objects"]
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words[0] == "/" and words[1:2] == ["saveconfig"]:
        save(state, words[2].split("=", 1)[1] if len(words) > 2 else state_file)
    elif words[0] == "/backstores/user:cairn" and words[1] == "create":
        kv = dict(w.split("=", 1) for w in words[2:])
        sos.append({"plugin": "user", "name": kv["name"], "size": int(kv["size"]),
                    "config": "cairn/" + kv["cfgstring"], "wwn": kv["wwn"], "alua_tpgs": []})
        print(f"Created user-backed storage object {kv['name']}.")
    elif words[0] == "/backstores/user:cairn" and words[1] == "delete":
        state["storage_objects"] = sos = [s for s in sos if s["name"] != words[2]]
        print(f"Deleted storage object {words[2]}.")
    elif words[0].startswith("/backstores/user:cairn/") and words[0].endswith("/alua"):
        name = words[0].split("/")[3]
        kv = dict(w.split("=", 1) for w in words[2:])
        so = next(s for s in sos if s["name"] == name)
        if words[1] == "create":
            so["alua_tpgs"].append({"name": kv["name"], "tg_pt_gp_id": int(kv["tag"])})
        else:
            so["alua_tpgs"] = [g for g in so["alua_tpgs"] if g["name"] != words[2]]
    elif words[0].startswith("/backstores/user:cairn/") and "/alua/" in words[0]:
        pass  # ALUA group attributes
    elif words[0].startswith("/backstores"):
        sys.exit(f"fake targetcli: unexpected command {line.strip()!r}")
save(state, state_file)
