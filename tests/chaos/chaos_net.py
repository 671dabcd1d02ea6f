# SPDX-License-Identifier: MIT
"""Network decisions in the chaos workload (issue 22 item 1; DESIGN §7).

The chaos run's sandboxes of `network.mode: allowlist` with `approval:
prompt` get a network workload of their own, driven by their worker:

  * fetch: a job that asks the approval proxy for 1-3 of the test hosts
    (HTTP to port 80 of names `network.hosts` maps to a server on the host's
    loopback, started here) and prints each host's HTTP status; the worker
    waits for its end and judges each status against the model;
  * consume: one non-blocking read of `events` (one event, or EAGAIN);
  * decide: `allow_sandbox`, `allow_temporary` or `deny` of a consumed,
    undecided event, written to `network`;
  * deny-pending.

The model (NetModel, one per scope) keeps what was acknowledged: a read of
`events` that returned an event, a decision whose write returned.  A
decision the kill cut short may or may not have landed; the check after the
restart settles it from the `network` view.  The invariants, after every
restart and in every fetch:

  * an acknowledged `allow_sandbox` is in force: the grant is in the
    `network` view with no expiry, and a fetch of its host answers 200;
  * a host nobody granted (no acknowledged or cut allow, no temporary grant
    that may still be live) answers 403, and no grant for it is shown;
  * an acknowledged decision is what the view shows for its event; a
    consumed event stays surfaced and, undecided, is still there (DESIGN §7:
    "Grants and undecided events survive a daemon restart");
  * no event is delivered twice: `read(events)` claims an event, and the
    claim is written before the read returns (docs/network.md), so an id
    that a read returned is never returned again, across restarts too; and
    after an EAGAIN or an acknowledged `deny-pending`, with no fetch since,
    the next read is EAGAIN again;
  * a sandbox keeps the network mode it was created with: the run creates
    some sandboxes before a restart with another `network.mode` in
    mount.conf (docs/network.md).

Recorded, not-yet-written events are the one thing a kill may lose
(docs/network.md: "A daemon killed in between loses the last events"), so
the model never asks for an unconsumed event to survive.
"""

import errno
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: netlab
import netlab  # noqa: E402
from chaos import Violation  # noqa: E402

HOSTS = [f"h{i}.chaos.test" for i in range(24)]
STATIC = "static.chaos.test"   # in allow_domains: always 200
TTL = 30                       # temporary_grant_ttl (the least the config takes)
SLACK = 3.0                    # seconds of clock and scheduling slack around a grant's expiry
DECISIONS = (("allow_sandbox", 0.35), ("deny", 0.45), ("allow_temporary", 0.20))

# One status per host: curl where the sandbox has it (local), else busybox
# nc to the proxy (the docker test image: its static busybox wget crashes on
# any name lookup, and its nc is the small one, without -q).  curl takes the
# proxy from http_proxy, which every allowlist sandbox has.
FETCH = r'''get() {
  if command -v curl >/dev/null 2>&1; then
    # an answer neither 200 nor 403 is a violation: its head and body go to
    # stderr, so the report names who answered (the Server header)
    d=/tmp/.fetch.$$; c=$(curl -sS -D "$d.h" -o "$d.b" -w '%{http_code}' --max-time 40 "http://$1/PATH/$1")
    case "$c" in 200|403) ;; *) { echo "== $1: $c"; cat "$d.h"; head -c 300 "$d.b"; echo; } >&2 ;; esac
    rm -f "$d.h" "$d.b"; printf '%s' "$c"
  else
    # (busybox nc exits at the end of its input: hold it open until the answer)
    r=/tmp/.fetch.$$; : > "$r"
    { printf 'GET http://%s/PATH/%s HTTP/1.1\r\nHost: %s\r\n\r\n' "$1" "$1" "$1"; i=0
      while [ ! -s "$r" ] && [ $i -lt 400 ]; do sleep 0.1; i=$((i + 1)); done; } | nc -w 40 127.0.0.1 3128 > "$r" 2>&1
    l=$(head -n 1 "$r" | tr -d '\r'); rm -f "$r"
    c=$(printf '%s' "$l" | sed -n 's/^HTTP\/1\.[01] \([0-9][0-9]*\).*/\1/p'); printf '%s' "${c:-no status: $l}"
  fi
}
for h in HOSTS; do printf '%s %s\n' "$h" "$(get "$h")"; done
'''


class NetModel:
    """What was acknowledged of one sandbox's network policy."""

    def __init__(self):
        self.reset()

    def reset(self):
        """A new sandbox: an empty policy state (docs/network.md)."""
        self.granted = set()        # hosts of an acknowledged allow_sandbox
        self.maybe_granted = set()  # hosts of an allow_sandbox the kill cut short
        self.temp = {}              # host -> until when a temporary grant may be live
        self.consumed = set()       # ids a read of events returned
        self.undecided = {}         # consumed id -> host, no decision written
        self.decided = {}           # id -> acknowledged decision
        self.maybe_decided = {}     # id -> (decision, host), cut short
        self.quiet = False          # nothing pending: a read of events now is EAGAIN
        self.hosts = {}             # consumed id -> its host
        self.orphans = set()        # fetch jobs the kill cut off from their worker (may still ask)

    def expect(self, host, t0):
        """The status a fetch started at t0 must get: 200, 403 or None (either)."""
        if host == STATIC or host in self.granted:
            return 200
        if host in self.maybe_granted or self.temp.get(host, 0) >= t0:
            return None
        return 403


class NetChaos:
    """The network half of a Chaos run: its test server, its config, its
    operations and its checks (chaos.py calls in)."""

    def __init__(self, chaos):
        self.c = chaos
        self.srv = netlab.LoopbackHTTP("chaos", 80)
        self.stats = {"net_fetches": 0, "net_hosts_fetched": 0, "net_events": 0, "net_decisions": 0,
                      "net_deny_pending": 0, "net_checked_grants": 0}

    def close(self):
        self.srv.close()

    def config(self):
        return {"mode": "allowlist", "approval": "prompt", "allow_domains": [STATIC],
                "temporary_grant_ttl": TTL, "allow_private_destinations": True,
                "hosts": {h: self.srv.addr for h in HOSTS + [STATIC]}}

    # ---- the operations (a worker's, on one of its own scopes)
    def step(self, wid, rng, s, ep):
        m = s.net
        r = rng.random()
        if r < 0.40:
            hosts = rng.sample(HOSTS, rng.choice([1, 1, 2, 3]))
            if rng.random() < 0.1:
                hosts.append(STATIC)
            return self.fetch(wid, s, ep, hosts)
        if r < 0.70:
            return self.consume(wid, s, ep)
        if r < 0.95 and m.undecided:
            rid = rng.choice(sorted(m.undecided))
            x, acc = rng.random(), 0.0
            for d, w in DECISIONS:
                acc += w
                if x < acc:
                    break
            return self.decide(wid, s, ep, rid, d)
        return self.deny_pending(wid, s, ep)

    def fetch(self, wid, s, ep, hosts, probe=False):
        """A job fetching hosts through the proxy; waits for its end and judges
        every status.  probe: part of a check (any failure is a violation)."""
        c, m = self.c, s.net
        s.counter += 1
        name = f"n{s.counter}"
        jd = c.p(s, "jobs", name)
        c.note(wid, f"fetch {s.rel}/{name} {' '.join(hosts)}")
        m.quiet = False
        t0 = time.time()
        try:
            os.mkdir(jd)
        except OSError as e:
            if c.failed(ep, e):
                s.maybe_jobs.add(name)
                m.orphans.add(name)
            return
        s.jobs[name] = {"kind": "net", "content": None, "killed": False, "started": False}
        try:
            with open(jd / "cmd", "w") as f:
                f.write(FETCH.replace("HOSTS", " ".join(hosts)).replace("PATH", f"{s.token}/{name}"))
            s.jobs[name]["started"] = True
            ex = (jd / "exit").read_text().strip()   # waits for the job's end
            out = (jd / "stdout").read_text()
        except OSError as e:
            if c.failed(ep, e):
                s.jobs[name]["started"] = s.jobs[name]["started"] or None
                m.orphans.add(name)  # it runs on in the sandbox
            return
        self.stats["net_fetches"] += 1
        got = dict(line.split(" ", 1) if " " in line else (line, "") for line in out.splitlines())
        for h in hosts:
            want = m.expect(h, t0)
            code = got.get(h, "missing")
            self.stats["net_hosts_fetched"] += 1
            if code not in ("200", "403"):
                try:
                    err = (jd / "stderr").read_text()[-1500:]
                except OSError as e:
                    err = f"({e})"
                path = f"/{s.token}/{name}/{h}"
                seen = sum(1 for r in list(self.srv.requests) if r[1] == path)
                raise Violation(f"{s.rel}/jobs/{name}: fetch of {h} answered {code!r} (exit {ex}): {out!r}, "
                                f"stderr {err!r}; expected {want} ({self._why(m, h)}); the test server "
                                f"answered {path} {seen} times")
            if want is not None and int(code) != want:
                raise Violation(f"{s.rel}: fetch of {h} answered {code}, expected {want} ({self._why(m, h)}); "
                                  f"events decided for it: {self._decisions_of(m, h)}")
        try:
            os.rmdir(jd)
        except OSError as e:
            if c.failed(ep, e):
                s.maybe_jobs.add(name)
                del s.jobs[name]
            return
        del s.jobs[name]

    @staticmethod
    def _why(m, h):
        return ("an acknowledged allow_sandbox" if h in m.granted else "allow_domains" if h == STATIC else
                "a cut allow_sandbox" if h in m.maybe_granted else "a temporary grant" if h in m.temp else
                "no grant was ever acknowledged or cut")

    @staticmethod
    def _decisions_of(m, host):
        return {i: d for i, d in m.decided.items() if m.hosts.get(i) == host}

    def read_event(self, s):
        """One non-blocking read of events: the parsed event or None (EAGAIN).
        OSError from the read is the caller's."""
        fd = os.open(self.c.p(s, "events"), os.O_RDONLY | os.O_NONBLOCK)
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return None
        finally:
            os.close(fd)
        lines = data.decode(errors="replace").splitlines()
        if len(lines) != 1:
            raise Violation(f"{s.rel}/events: one event per read, got {data[:300]!r}")
        try:
            ev = json.loads(lines[0])
        except ValueError as e:
            raise Violation(f"{s.rel}/events: not JSON ({e}): {lines[0][:200]!r}")
        return ev

    def take(self, s, ev, when):
        """An event a read returned: never one returned before, never one
        after nothing was pending."""
        m, rid = s.net, ev.get("request_id")
        if rid in m.consumed:
            raise Violation(f"{s.rel}/events ({when}): event {rid} ({ev.get('host')}) delivered twice")
        if m.quiet:
            raise Violation(f"{s.rel}/events ({when}): event {rid} ({ev.get('host')}) delivered after "
                                   "nothing was pending and no fetch since")
        if ev.get("host") not in HOSTS or ev.get("port") != 80 or ev.get("method") != "GET":
            raise Violation(f"{s.rel}/events ({when}): an event no fetch asked for: {ev}")
        m.consumed.add(rid)
        m.undecided[rid] = m.hosts[rid] = ev["host"]
        self.stats["net_events"] += 1

    def consume(self, wid, s, ep):
        c, m = self.c, s.net
        c.note(wid, f"events {s.rel}")
        try:
            ev = self.read_event(s)
        except OSError as e:
            if c.failed(ep, e):
                m.quiet = False
            return
        if ev is None:
            m.quiet = self.settled(s)
            return
        self.take(s, ev, "read")

    def settled(self, s):
        """No fetch job of a cut operation is still running (one could still
        make an event)."""
        for name in sorted(s.net.orphans):
            try:
                st = json.loads(self.c.p(s, "jobs", name, "status").read_text()).get("state")
            except FileNotFoundError:
                st = None
            except (OSError, ValueError):
                return False
            if st in ("starting", "running"):
                return False
            s.net.orphans.discard(name)
        return True

    def write_network(self, s, text):
        fd = os.open(self.c.p(s, "network"), os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def decide(self, wid, s, ep, rid, d):
        c, m = self.c, s.net
        host = m.undecided.pop(rid)
        c.note(wid, f"decide {s.rel} {d} {rid} ({host})")
        try:
            self.write_network(s, f"{d} {rid}\n")
        except OSError as e:
            if c.failed(ep, e):
                m.maybe_decided[rid] = (d, host)
                if d == "allow_sandbox":
                    m.maybe_granted.add(host)
                elif d == "allow_temporary":
                    m.temp[host] = max(m.temp.get(host, 0), time.time() + TTL + SLACK)
            return
        self.stats["net_decisions"] += 1
        m.decided[rid] = d
        if d == "allow_sandbox":
            m.granted.add(host)
            m.maybe_granted.discard(host)
        elif d == "allow_temporary":
            m.temp[host] = max(m.temp.get(host, 0), time.time() + TTL + SLACK)

    def deny_pending(self, wid, s, ep):
        c, m = self.c, s.net
        c.note(wid, f"deny-pending {s.rel}")
        try:
            self.write_network(s, "deny-pending\n")
        except OSError as e:
            if c.failed(ep, e):
                m.quiet = False
            return
        self.stats["net_deny_pending"] += 1
        m.quiet = self.settled(s)

    # ---- the checks (workers paused, the daemon up, the scope active)
    def check(self, s):
        """After a restart and a reclaim: the acknowledged policy is in force."""
        c, m = self.c, s.net
        try:
            n = json.loads(c.p(s, "network").read_text())
        except (OSError, ValueError) as e:
            raise Violation(f"{s.rel}/network unreadable after a restart: {e}")
        if n.get("mode") != "allowlist":
            raise Violation(f"{s.rel}: created in allowlist, its network view says {n.get('mode')!r}")
        ev = {e["request_id"]: e for e in n.get("events", [])}
        grants = {g["host"]: g["expires_at"] for g in n.get("grants", []) if g.get("port") == 80}
        now = time.time()
        for rid, (d, host) in sorted(m.maybe_decided.items()):
            got = ev[rid]["decision"] if rid in ev else None
            if got == d:
                m.decided[rid] = d
            elif got is None and rid in ev:
                m.undecided[rid] = host
            elif rid in ev:
                raise Violation(f"{s.rel}: a cut '{d} {rid}' left decision {got!r}")
        m.maybe_decided.clear()
        for h in sorted(m.maybe_granted):
            if h in grants and grants[h] is None:
                m.granted.add(h)
        m.maybe_granted.clear()
        for h in sorted(m.granted):
            self.stats["net_checked_grants"] += 1
            if h not in grants or grants[h] is not None:
                raise Violation(f"{s.rel}: the acknowledged allow_sandbox of {h} is not in force after a "
                                  f"restart: grants {n.get('grants')}")
        for h, exp in sorted(grants.items()):
            if exp is None and h not in m.granted:
                raise Violation(f"{s.rel}: a grant of {h} for the sandbox's lifetime nobody acknowledged")
            if exp is not None and exp > m.temp.get(h, 0) and exp > now:
                raise Violation(f"{s.rel}: a temporary grant of {h} until {exp} nobody acknowledged "
                                  f"(model: until {m.temp.get(h)})")
        for rid, d in sorted(m.decided.items()):
            if rid in ev and ev[rid]["decision"] != d:
                raise Violation(f"{s.rel}: the acknowledged '{d} {rid}' shows {ev[rid]['decision']!r}")
        for rid, host in sorted(m.undecided.items()):
            if rid not in ev or ev[rid]["decision"] is not None or ev[rid].get("surfaced") is not True:
                raise Violation(f"{s.rel}: the consumed undecided event {rid} ({host}) did not survive the "
                                  f"restart as it was: {ev.get(rid)}")
        for rid in sorted(m.consumed & set(ev)):
            if ev[rid].get("surfaced") is not True:
                raise Violation(f"{s.rel}: consumed event {rid} is unsurfaced again after a restart")
        m.temp = {h: t for h, t in m.temp.items() if t >= now}
        # a read now: never an event returned before; EAGAIN if nothing was pending
        try:
            e = self.read_event(s)
        except OSError as e:
            raise Violation(f"{s.rel}/events unreadable after a restart: {e}")
        if e is None:
            m.quiet = self.settled(s)
        else:
            self.take(s, e, "after a restart")

    def probe(self, s, rng):
        """After a restart: one fetch of a granted host (200), a host nobody
        granted (403) and the allow_domains one (200)."""
        m = s.net
        hosts = [STATIC]
        if m.granted:
            hosts.append(rng.choice(sorted(m.granted)))
        never = [h for h in HOSTS if m.expect(h, time.time()) == 403]
        if never:
            hosts.append(rng.choice(never))
        self.fetch("check", s, self.c.epoch, hosts, probe=True)

    def hostile(self, s):
        """Hostile input to a live sandbox's network file: an unknown id, an
        unknown command and a decision against an acknowledged one are
        refused with their errno and change no grant."""
        c = self.c
        before = json.loads(c.p(s, "network").read_text())
        shown = {e["request_id"] for e in before.get("events", [])}
        bad = [("deny 0123abcd-0000-4000-8000-000000000000\n", errno.ENOENT), ("allow_forever x\n", errno.EINVAL)]
        bad += [(f"allow_sandbox {rid}\n", errno.EEXIST) for rid, d in sorted(s.net.decided.items())
                if d == "deny" and rid in shown][:1]
        for text, want in bad:
            try:
                self.write_network(s, text)
            except OSError as e:
                if e.errno != want:
                    raise Violation(f"{s.rel}/network: {text.strip()!r} gave {e}, expected errno {want}")
                continue
            raise Violation(f"{s.rel}/network: {text.strip()!r} was accepted")
        after = json.loads(c.p(s, "network").read_text())

        def forever(n):
            return sorted(g["host"] for g in n.get("grants", []) if g.get("expires_at") is None)
        if forever(after) != forever(before):
            raise Violation(f"{s.rel}/network: a refused write changed the grants")

    def check_netns(self, when, live):
        """Nothing of the daemon's lives in a network namespace no sandbox owns:
        each socket it holds is in its own namespace or in a live sandbox's
        (the proxy's listener and accepted connections), and each namespace
        handle it holds is a live sandbox's.  live: {token: init pid}."""
        d = self.c.d
        pid = d.proc.pid
        mine = _netns(pid)
        owned = {_netns(p) for p in live.values() if p} - {None}

        def foreign():
            socks, nss = set(), set()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    t = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if t.startswith("socket:["):
                    socks.add(int(t[8:-1]))
                elif t.startswith("net:["):
                    nss.add(t)
            known = _sockets_of(pid)
            for p in live.values():
                if p:
                    known |= _sockets_of(p)
            return socks - known, nss - owned - {mine}
        s1, n1 = foreign()
        if s1 or n1:
            time.sleep(0.5)  # a connection closing between the two reads
            s2, n2 = foreign()
            s1, n1 = s1 & s2, n1 & n2
        if s1:
            raise Violation(f"{when}: the daemon holds {len(s1)} sockets in a network namespace that is "
                                   f"neither its own nor a live sandbox's (inodes {sorted(s1)[:8]})")
        if n1:
            raise Violation(f"{when}: the daemon holds network namespaces no live sandbox owns: {sorted(n1)}")


def _netns(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


_TABLES = ("tcp", "tcp6", "udp", "udp6", "raw", "raw6", "unix", "netlink", "packet", "udplite", "udplite6")


def _sockets_of(pid):
    """Inodes of every socket of pid's network namespace (/proc/PID/net/*)."""
    out = set()
    for t in _TABLES:
        try:
            with open(f"/proc/{pid}/net/{t}") as f:
                f.readline()  # the header
                rows = f.read().splitlines()
        except OSError:
            continue
        # unix: Num RefCount Protocol Flags Type St Inode Path; tcp, udp, raw:
        # the 10th column (the header has more words than the rows have
        # columns); netlink, packet: the last
        idx = 6 if t == "unix" else 9 if t.startswith(("tcp", "udp", "raw")) else -1
        for r in rows:
            parts = r.split()
            try:
                out.add(int(parts[idx]))
            except (IndexError, ValueError):
                pass
    return out
