#pragma once
// The volumes one cached image occupies in a host's pool. Every name starts
// with `egress.<entry>.<image>.<digest prefix>`: names are dot-free (the
// name pattern), so two provider entries, or two images, can never produce
// the same volume name (docs/spec.md 9), and a changed digest in the config
// never meets the old image's volumes.
//
// - data     `<stem>`           the image's bytes, as downloaded; what
//                               overlays reference.
// - partial  `<stem>.partial`   exists while `<stem>` is being written: the
//                               name that marks the data as partial, for the
//                               engine and for anyone running virsh vol-list.
// - marker   `<stem>.verified`  written only after length and sha256 were
//                               verified over the whole data volume; records
//                               both. The cache accepts the data volume only
//                               with a marker matching the configured digest
//                               (docs/spec.md 8).
//
// Why not upload into `<stem>.partial` and rename it: libvirt cannot rename
// a volume, and its clone (virStorageVolCreateXMLFrom) would copy the whole
// image on the host, or, for qcow2, convert it with qemu-img and change its
// bytes (and so its digest).

#include <string>

namespace egress::images {

struct volume_names {
  std::string data;
  std::string partial;
  std::string marker;

  /// `digest`: the configured sha256 (hex); its first 16 digits go in.
  static volume_names of(const std::string& entry, const std::string& image,
                         const std::string& digest) {
    volume_names n;
    n.data = "egress." + entry + "." + image + "." + digest.substr(0, 16);
    n.partial = n.data + ".partial";
    n.marker = n.data + ".verified";
    return n;
  }

  /// The prefix every volume of `entry` starts with (for listing and GC).
  static std::string entry_prefix(const std::string& entry) {
    return "egress." + entry + ".";
  }
};

} // namespace egress::images
