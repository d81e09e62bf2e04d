#!/usr/bin/python3
# bench/converge_libvirt.py: the baseline for bench/converge. A reconcile loop
# as the earlier Go operator ran it (docs/notes/failures.md#stalled-host-holds-up-others) (controller-runtime, MaxConcurrentReconciles
# workers over a queue of Proxy objects, one cached libvirt connection per
# host), written with libvirt-python (Debian python3-libvirt):
#
#   /usr/bin/python3 bench/converge_libvirt.py --workers W --spec FILE|-
#
# The spec (JSON, a file or stdin):
#   {"entry": "bench",
#    "hosts": {"hv0": "<libvirt uri>", ...},
#    "proxies": [{"name": "c000", "host": "hv0", "domain_type": "test",
#                 "vcpus": 1, "memory_mib": 16, "network": "default",
#                 "tags": []}, ...]}
#
# Each reconcile makes the calls the engine makes for a proxy that does not
# exist yet: lookupByName (expecting VIR_ERR_NO_DOMAIN), defineXML with the
# same domain XML and <metadata> mark as providers/libvirt/domain_xml.cpp
# builds, create(), then interfaceAddresses(SRC_LEASE) until the domain has a
# usable address (retried every --address-retry seconds, at most
# --address-timeout). Connections are opened lazily by the first reconcile
# that needs one (under a per-host lock, as a pool would) and are shared by
# every worker: libvirt connections are thread-safe, and libvirt-python drops
# the GIL around each libvirt call.
#
# The wall time runs from the submission of the first reconcile to the last
# reconcile's end; with --connect lazy (default) no connection is open yet
# when it starts, with --connect before every host's connection was opened
# (all at once, time reported as open_wall) before it starts. Interpreter
# start-up and the import are never in it (a long-running operator pays them
# once); their CPU is reported as cpu_pre. The CPU inside the window is
# reported as cpu (this process, every thread) and cpu_children (its
# descendants: with the ssh transport the OpenSSH clients libvirt runs, one per
# connection, which do the SSH work; none with libssh2), each to the
# nanosecond, so that bench/converge can set the pool's own CPU per converged
# proxy beside the engine's. The last line of output is "RESULT key=value ..."
# for bench/converge to parse.

import argparse
import hashlib
import json
import os
import resource
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from xml.sax.saxutils import escape

import libvirt

MARK_NS = "urn:x-egress-engine:mark:1"


def spec_hash(p):
    # actors/proxy.cpp spec_hash (image-less form).
    text = "v1\n%s\n%s\n%d\n%d\n%s\n" % (p["name"], p["domain_type"], p["vcpus"],
                                          p["memory_mib"], p["network"])
    for t in p.get("tags", []):
        text += "tag:%s\n" % t
    return hashlib.sha256(text.encode()).hexdigest()


def domain_xml(p, entry):
    # The document providers/libvirt/domain_xml.cpp renders for an image-less
    # proxy: type, name, memory, vcpu, os, the mark in <metadata>, one NIC.
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    tags = "".join("<egress:tag>%s</egress:tag>" % escape(t) for t in p.get("tags", []))
    nic = ""
    if p["network"]:
        nic = ('<interface type="network"><source network="%s" />'
               '<model type="virtio" /></interface>' % escape(p["network"]))
    return (
        '<domain type="%s">\n'
        '  <name>%s</name>\n'
        '  <memory unit="MiB">%d</memory>\n'
        '  <vcpu>%d</vcpu>\n'
        '  <os><type arch="x86_64">hvm</type></os>\n'
        '  <metadata>\n'
        '    <egress:mark xmlns:egress="%s">\n'
        '      <egress:uid>%s</egress:uid>\n'
        '      <egress:created-at>%s</egress:created-at>\n'
        '      <egress:entry>%s</egress:entry>\n'
        '      <egress:spec-hash>%s</egress:spec-hash>\n'
        '      <egress:tags>%s</egress:tags>\n'
        '    </egress:mark>\n'
        '  </metadata>\n'
        '  <devices>%s</devices>\n'
        '</domain>\n'
    ) % (escape(p["domain_type"]), escape(p["name"]), p["memory_mib"], p["vcpus"], MARK_NS,
         secrets.token_hex(16), now, escape(entry), spec_hash(p), tags, nic)


def task_cpu_seconds(pid):
    """CPU seconds of a live process's threads, from their schedstat (nanoseconds
    on the CPU). Not /proc/PID/stat's utime and stime: those count whole clock
    ticks (10 ms), as much as a process's share of a short window."""
    total = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
    except (FileNotFoundError, ProcessLookupError):
        pass  # ended meanwhile: its CPU is its reaper's RUSAGE_CHILDREN
    return total / 1e9


def descendants_cpu():
    """pid -> CPU seconds of every live descendant of this process."""
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        parent[int(name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    mine = set()
    for pid in parent:
        q = pid
        while q in parent and q > 1:
            q = parent[q]
            if q == os.getpid():
                mine.add(pid)
                break
    return {pid: task_cpu_seconds(pid) for pid in mine}


def children_cpu_since(before, reaped_before):
    """Descendants' CPU since `before` (a descendants_cpu() taken earlier):
    the live ones' growth (a new one counts whole) and what the reaped ones
    left in RUSAGE_CHILDREN since `reaped_before`."""
    now = descendants_cpu()
    live = sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return live + r.ru_utime + r.ru_stime - reaped_before


def reaped_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def usable(addr, kind):
    # providers/libvirt/domains.cpp usable(): no loopback, no IPv6 link-local.
    if not addr:
        return False
    if kind == libvirt.VIR_IP_ADDR_TYPE_IPV4:
        return not addr.startswith("127.")
    return addr != "::1" and not addr.startswith("fe80:")


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = {}  # name -> [count, total seconds, max seconds]

    def timed(self, name, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            dt = time.perf_counter() - t0
            with self.lock:
                c = self.calls.setdefault(name, [0, 0.0, 0.0])
                c[0] += 1
                c[1] += dt
                c[2] = max(c[2], dt)


class Pool:
    """One connection per host, opened on first use, shared by all workers."""

    def __init__(self, uris, stats):
        self.uris = uris
        self.stats = stats
        self.conns = {}
        self.locks = {h: threading.Lock() for h in uris}

    def get(self, host):
        c = self.conns.get(host)
        if c is not None:
            return c
        with self.locks[host]:
            c = self.conns.get(host)
            if c is None:
                c = self.stats.timed("open", libvirt.open, self.uris[host])
                self.conns[host] = c
            return c

    def close(self):
        for c in self.conns.values():
            try:
                c.close()
            except libvirt.libvirtError:
                pass


def reconcile(pool, stats, p, entry, retry, timeout):
    conn = pool.get(p["host"])
    try:
        stats.timed("lookup", conn.lookupByName, p["name"])
        raise RuntimeError("%s: exists already (the bench starts from zero domains)" % p["name"])
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
            raise
    dom = stats.timed("define", conn.defineXML, domain_xml(p, entry))
    stats.timed("create", dom.create)
    deadline = time.monotonic() + timeout
    while True:
        ifaces = stats.timed("addresses", dom.interfaceAddresses,
                             libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE)
        for iface in (ifaces or {}).values():
            for a in iface.get("addrs") or []:
                if usable(a.get("addr"), a.get("type")):
                    return a["addr"]
        if time.monotonic() >= deadline:
            raise RuntimeError("%s: no address after %.0f s" % (p["name"], timeout))
        time.sleep(retry)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--spec", required=True, help="JSON file, or - for stdin")
    ap.add_argument("--address-retry", type=float, default=0.2)
    ap.add_argument("--address-timeout", type=float, default=60)
    ap.add_argument("--connect", choices=["lazy", "before"], default="lazy",
                    help="lazy: the first reconcile per host opens its connection, inside"
                    " the timed window; before: every host's connection is opened (all at"
                    " once) before the clock starts, as in an operator whose pool is warm")
    args = ap.parse_args()
    spec = json.load(sys.stdin if args.spec == "-" else open(args.spec))
    entry = spec.get("entry", "bench")
    proxies = spec["proxies"]
    # Silence libvirt's default error printer (lookups are expected to fail).
    libvirt.registerErrorHandler(lambda ctx, err: None, None)

    stats = Stats()
    pool = Pool(spec["hosts"], stats)
    errors = []
    addresses = {}
    open_wall = 0.0
    if args.connect == "before":
        t = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(spec["hosts"])) as ex:
            list(ex.map(pool.get, spec["hosts"]))
        open_wall = time.perf_counter() - t
    children0, reaped0 = descendants_cpu(), reaped_cpu()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_pre = cpu0.ru_utime + cpu0.ru_stime  # interpreter start-up, import, spec
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.workers) as ex:
        futs = {ex.submit(reconcile, pool, stats, p, entry, args.address_retry,
                          args.address_timeout): p["name"] for p in proxies}
        for f, name in futs.items():
            try:
                addresses[name] = f.result()
            except Exception as e:  # reported, counted as not converged
                errors.append("%s: %s" % (name, e))
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_children = children_cpu_since(children0, reaped0)
    pool.close()

    for e in errors[:5]:
        print("error:", e)
    for name, (n, total, mx) in sorted(stats.calls.items()):
        print("call %-9s n=%4d mean=%7.2f ms max=%7.2f ms" % (name, n, total / n * 1e3, mx * 1e3))
    kv = {
        "wall": "%.4f" % wall,
        "converged": len(addresses),
        "errors": len(errors),
        "cpu": "%.4f" % (cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime),
        "cpu_children": "%.4f" % cpu_children,
        "cpu_pre": "%.3f" % cpu_pre,
        "open_wall": "%.4f" % open_wall,
    }
    for name, (n, total, _) in stats.calls.items():
        kv[name + "_n"] = n
        kv[name + "_ms"] = "%.3f" % (total / n * 1e3)
    print("RESULT " + " ".join("%s=%s" % kv_ for kv_ in kv.items()), flush=True)
    return 0 if not errors and len(addresses) == len(proxies) else 1


if __name__ == "__main__":
    sys.exit(main())
