// build/testbed-sweep: removes what test-bed processes that no longer exist
// left behind (their namespaces, veths, tagged iptables rules, temp dirs and
// the qemu processes of a private libvirtd that died with its test), as
// every root suite does before it starts (testbed::sweep_stale in
// testbed/testbed_skip.cpp). Only what belongs to a dead PID is touched.
#include <cstdio>
#include <string>

#include <unistd.h>

#include "testbed/testbed.hpp"

int main(int argc, char** argv) {
  if (argc > 1) {
    std::string a = argv[1];
    bool help = a == "--help" || a == "-h";
    std::fprintf(help ? stdout : stderr,
                 "usage: %s\n  removes what dead test-bed processes left behind (root)\n",
                 argv[0]);
    return help ? 0 : 2;
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "testbed-sweep: needs root (namespaces, links, iptables)\n");
    return 1;
  }
  egress::testbed::sweep_stale();
  return 0;
}
