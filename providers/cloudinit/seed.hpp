#pragma once
// A cloud-init NoCloud seed: an ISO 9660 volume labelled "cidata" whose root
// holds user-data, meta-data and (optionally) network-config. cloud-init
// finds it by its label on any attached disk, so a proxy VM gets its
// settings from a small raw volume next to its overlay disk:
//
//   auto files = cloudinit::render_seed({.instance_id = uid, .hostname = "px-1",
//                                        .port = 8888, .allow_cidr = "10.0.0.0/8"});
//   if (!files) return files.error();              // invalid_argument, names the field
//   auto iso = cloudinit::build_seed_iso(*files);  // the volume's bytes
//   // lv::create_volume(c, pool, name, iso->size(), "raw"), then
//   // lv::upload_volume(c, pool, name, 0, iso->size(), <source over *iso>)
//
// The image is built in memory with libisofs (no temporary file, no
// genisoimage process): it is a few KiB, and building it is pure, so it can
// run anywhere, also on a scheduler thread. The layout is the one
// cloud-localds produces (`genisoimage -volid cidata -joliet -rock`): Rock
// Ridge and Joliet carry the real names, the plain ISO 9660 tree has the
// mangled uppercase ones (USER_DATA.;1) that conformance demands.

#include <cstdint>
#include <ctime>
#include <string>

#include <caf/expected.hpp>

namespace egress::cloudinit {

/// The files of a NoCloud seed, byte for byte.
struct seed_files {
  std::string user_data;       // "#cloud-config\n..." (any bytes)
  std::string meta_data;       // "instance-id: ...\nlocal-hostname: ...\n"
  std::string network_config;  // optional: "" = no network-config file at all
};

/// The volume id cloud-init looks for. Written lowercase as is (libisofs's
/// "relaxed" volume attributes): strict ISO 9660 allows only d-characters
/// (uppercase), but cloud-init and blkid accept either, and lowercase is
/// what cloud-localds and the NoCloud docs show.
inline constexpr const char* seed_volume_id = "cidata";

/// Every timestamp in a seed (volume creation and modification, directory
/// records, Rock Ridge TF entries), in UTC: 2000-01-01T00:00:00Z. A fixed
/// time makes the image a function of its files alone: a seed rebuilt with
/// the same content is the same volume, byte for byte. (Not 0: libisofs
/// reads a volume time of 0 as "now".)
inline constexpr std::time_t seed_timestamp = 946684800;

/// Builds the ISO 9660 image (Joliet + Rock Ridge, volume id "cidata")
/// holding user-data, meta-data and, if non-empty, network-config at its
/// root; files are mode 0444, directories 0555, owner 0:0 whoever builds.
///
/// Deterministic: the same files give the same bytes, at any time, in any
/// time zone, as any user (timestamps, modes and owners are all fixed), with
/// the same libisofs. Another libisofs version may lay the same files out
/// differently, so a spec hash should cover the seed_files (or what they
/// were rendered from) rather than these bytes, or a library upgrade would
/// read as a changed spec on every proxy.
///
/// Builds are serialized process-wide (libisofs promises no thread safety
/// for concurrent image generation, and one build takes about a
/// millisecond). Each build starts and joins one libisofs writer thread and
/// frees everything it allocated on every path. libisofs is initialized on
/// first use and never finalized; its messages are never printed to stderr
/// (they would garble the engine's status table) but are quoted in errors.
///
/// Errors: any libisofs failure is permanent ec::invalid_argument ("cloud-init
/// seed: <step>: <libisofs's text>"): the same files would fail again.
caf::expected<std::string> build_seed_iso(const seed_files& files);

/// Where render_seed's user-data makes cloud-init write the proxy settings.
inline constexpr const char* proxy_env_path = "/etc/egress/proxy.env";

/// The settings of one proxy VM.
struct proxy_seed {
  /// cloud-init's instance-id: a new id makes cloud-init run its first-boot
  /// modules again. 1..128 of [A-Za-z0-9._-], starting with a letter or
  /// digit (the engine's uid, 32 hex digits, fits).
  std::string instance_id;
  /// local-hostname: dot-separated labels of [A-Za-z0-9-] (1..63 each, no
  /// '-' at either end), at most 64 characters in all (Linux's
  /// HOST_NAME_MAX).
  std::string hostname;
  /// The proxy's listening port: 1..65535.
  uint16_t port = 8888;
  /// The client network the proxy admits: an IPv4 or IPv6 address with a
  /// prefix length ("10.0.0.0/8", "fd00::/64"). Host bits may be set; the
  /// proxy masks them.
  std::string allow_cidr;
};

/// Renders the engine's standard seed for one proxy (pure; see
/// tests/unit/seed.cpp for the exact text):
/// - meta-data: instance-id and local-hostname, single-quoted (so that an
///   id like "1e5", "null" or "yes" stays a string to YAML);
/// - user-data: "#cloud-config" and one write_files entry that writes
///   proxy_env_path with
///     EGRESS_INSTANCE_ID=<id>
///     EGRESS_PORT=<port>
///     EGRESS_ALLOW_CIDR=<cidr>
///   An appliance without cloud-init reads the same lines straight from the
///   mounted seed with busybox: every line of user-data that is, after
///   leading blanks, "EGRESS_<KEY>=<value>" is a setting, and no other line
///   starts so (`sed -n 's/^ *\(EGRESS_[A-Z_]*=\)/\1/p' user-data`). The
///   values need no quoting in YAML, in the file or in a shell that sources
///   it: validation admits no newline, blank, quote, '#' or shell
///   metacharacter (an IPv6 CIDR's ':' is none of these);
/// - network-config (version 2): DHCPv4 on every interface whose name
///   starts with "e" (eth0, ens3, enp1s0...): a proxy VM has one NIC, so
///   that is its first one.
/// Invalid values are permanent ec::invalid_argument naming the field
/// ("proxy_seed.hostname: ..."), the value quoted (control bytes escaped).
caf::expected<seed_files> render_seed(const proxy_seed& p);

} // namespace egress::cloudinit
