# SPDX-License-Identifier: MIT
"""Helpers of the tests of the DeerFlow package (python/sbxfs_deerflow),
imported from the source tree without installing it: a test module does

    import deerflowutil
    from deerflowutil import sbxfs_deerflow

and gets the package, `provider_for(m)` (an SbxfsSandboxProvider on a
mounted sbxfs of the conftest factory) and `agent_turn(provider)`, the
script of an agent's turn that the local and docker tests both play.
"""

import hashlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
import sbxfs_deerflow  # noqa: E402

WS = "/mnt/user-data/workspace"


def scope_token(user, thread):
    """DeerFlow's derive_sandbox_scope_token (reference §4.1)."""
    return hashlib.sha256(f"{user}:{thread}".encode()).hexdigest()[:16]


def provider_for(m, **kw):
    return sbxfs_deerflow.SbxfsSandboxProvider(mountpoint=str(m.mnt), **kw)


CALC = 'add() {\n  echo $(( $1 - $2 ))\n}\n'
TESTS = r'''. ./calc.sh
fails=0
check() {
  got=$(add "$1" "$2")
  if [ "$got" = "$3" ]; then echo "ok add $1 $2"; else echo "FAIL add $1 $2: got $got, want $3"; fails=$((fails + 1)); fi
}
check 1 2 3
check 0 0 0
check 20 22 42
if [ "$fails" -ne 0 ]; then echo "$fails failed" >&2; exit 1; fi
echo "all passed"
'''


def agent_turn(provider, user="alice", thread="turn-1"):
    """An agent's turn, as DeerFlow's tools would drive the Sandbox: write
    code and its tests, run them, read the failure, fix the code, run again.
    Returns the transcript (tool, argument, result) for the caller to look
    at; asserts what every provider must give."""
    log = []
    sid = provider.acquire(thread, user_id=user)
    assert sid == scope_token(user, thread)
    sb = provider.get(sid)
    sb.write_file(f"{WS}/calc.sh", CALC)
    sb.write_file(f"{WS}/tests/test_calc.sh", TESTS)
    assert sb.list_dir(WS) == [f"{WS}/calc.sh", f"{WS}/tests/", f"{WS}/tests/test_calc.sh"]
    first = sb.execute_command("sh tests/test_calc.sh")  # in /mnt/user-data/workspace
    log.append(("execute_command", "sh tests/test_calc.sh", first))
    assert "FAIL add 1 2: got -1, want 3" in first, first
    assert "Std Error:\n2 failed" in first and first.endswith("\nExit Code: 1"), first
    # read the failure: which line computes the sum?
    hits, truncated = sb.grep(WS, r"\$\(\( \$1 [-+] \$2 \)\)", glob="*.sh")
    log.append(("grep", "$(( $1 - $2 ))", hits))
    assert not truncated and [(h.path, h.line_number) for h in hits] == [(f"{WS}/calc.sh", 2)], hits
    line = sb.read_file(f"{WS}/calc.sh", hits[0].line_number, hits[0].line_number)
    assert line == "  echo $(( $1 - $2 ))\n", line
    text = sb.read_file(f"{WS}/calc.sh")
    sb.update_file(f"{WS}/calc.sh", text.replace("$1 - $2", "$1 + $2").encode())
    second = sb.execute_command("sh tests/test_calc.sh")
    log.append(("execute_command", "sh tests/test_calc.sh", second))
    assert second == "ok add 1 2\nok add 0 0\nok add 20 22\nall passed\n", second
    # the result, as DeerFlow's gateway would fetch an artifact
    sb.execute_command("mkdir -p ../outputs && sh tests/test_calc.sh > ../outputs/report.txt")
    assert sb.download_file("/mnt/user-data/outputs/report.txt").endswith(b"all passed\n")
    matches, truncated = sb.glob("/mnt/user-data", "**/*.sh")
    assert sorted(matches) == [f"{WS}/calc.sh", f"{WS}/tests/test_calc.sh"] and not truncated, matches
    provider.release(sid)
    return log
