#!/bin/bash
# Removes what test-bed processes that no longer exist left behind: network
# namespaces egt-<pid>-<n>, veths egt<pid>h<n>, iptables rules tagged
# egress-test-<pid>, temp dirs /tmp/egress-testbed-<pid>-* and the qemu
# processes (and their cgroups) of a private libvirtd that died with its test.
# Only things whose <pid> is no longer running are touched. The C++ twin is
# testbed::sweep_stale(), which require_root_or_skip() runs before each suite.
#
# usage: scripts/testbed/sweep.sh [-n]     (-n: only print what it would do)
set -u
dry=0
[ "${1:-}" = "-n" ] && dry=1
tmp=${EGRESS_TESTBED_TMP:-/tmp}

act() { echo "+ $*"; [ "$dry" = 1 ] || "$@"; }
dead() { [ "$1" -gt 1 ] && [ ! -e "/proc/$1" ]; }

for ns in $(ip netns list | awk '{print $1}' | grep -E '^egt-[0-9]+-[0-9]+$'); do
  pid=${ns#egt-}; pid=${pid%%-*}
  dead "$pid" && act ip netns del "$ns"
done

for dev in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^egt[0-9]+h[0-9]+$'); do
  pid=${dev#egt}; pid=${pid%%h*}
  dead "$pid" && act ip link del "$dev"  # deletes its peer too
done

for table in filter nat mangle raw; do
  iptables -w -t "$table" -S | grep -E '^-A .*egress-test-[0-9]+' | while read -r rule; do
    pid=$(echo "$rule" | sed -E 's/.*egress-test-([0-9]+).*/\1/')
    dead "$pid" || continue
    echo "+ iptables -t $table ${rule/#-A/-D}"
    [ "$dry" = 1 ] || eval "iptables -w -t $table ${rule/#-A/-D}"  # eval: the rule's own quoting
  done
done

# qemu of a dead test's libvirtd: its pid files are in the overlay upper of /run.
kill_domains() {
  local pidfile name qpid cg
  for pidfile in "$1"/run-upper/libvirt/qemu/*.pid; do
    [ -f "$pidfile" ] || continue
    name=$(basename "$pidfile" .pid)
    qpid=$(cat "$pidfile")
    # driver.pid is libvirtd's; and a PID may have been reused: check for this guest.
    { tr '\0' ' ' < "/proc/$qpid/cmdline"; } 2>/dev/null | grep -q "guest=$name," || continue
    cg=$(cat "/proc/$qpid/cgroup")
    act kill -KILL "$qpid"
    if [ "$dry" = 0 ]; then  # wait (at most 5 s) until init has reaped it
      for _ in $(seq 100); do [ -e "/proc/$qpid" ] || break; sleep 0.05; done
    fi
    echo "$cg" | while IFS=: read -r _ ctrl path; do
      case "$path" in /machine/*.libvirt-qemu*) ;; *) continue ;; esac
      if [ -n "$ctrl" ]; then mnt=/sys/fs/cgroup/${ctrl#name=}
      elif [ -d /sys/fs/cgroup/unified ]; then mnt=/sys/fs/cgroup/unified
      else mnt=/sys/fs/cgroup; fi
      root=$mnt${path%%.libvirt-qemu*}.libvirt-qemu
      [ -d "$root" ] || continue
      find "$root" -depth -type d | while read -r d; do act rmdir "$d"; done  # children first
    done
  done
}

for dir in "$tmp"/egress-testbed-[0-9]*-*; do
  [ -d "$dir" ] || continue
  pid=${dir#"$tmp"/egress-testbed-}; pid=${pid%%-*}
  dead "$pid" || continue
  kill_domains "$dir"
  act rm -rf "$dir"
done
exit 0
