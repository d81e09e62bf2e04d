#include "providers/cloudinit/seed.hpp"

#include <arpa/inet.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>

// libisofs.h carries its own copy of libburn's struct burn_source, declared
// only on request; we read the image without libburn.
#define LIBISOFS_WITHOUT_LIBBURN 1
#include <libisofs/libisofs.h>

#include "messages/error.hpp"
#include "messages/names.hpp"

namespace egress::cloudinit {

namespace {

// -- libisofs: once-per-process setup, serialization, messages ----------------

// libisofs keeps process-wide state (its message queue, the assumed local
// charset), and documents nothing about two images being generated at once.
// A seed is a few KiB, so one build at a time costs nothing.
std::mutex build_mutex;

// Severities as libisofs spells them; its API takes them as char*.
char sev_queue[] = "SORRY";  // SORRY and worse are kept for our errors
char sev_print[] = "NEVER";  // nothing goes to stderr
char sev_all[] = "ALL";
char print_id[] = "libisofs: ";

int init_libisofs() {
  static std::once_flag once;
  static int result = 0;
  std::call_once(once, [] {
    // bit0: do not call setlocale() (a library must not change the process's
    // locale; our names are ASCII, the same in every charset).
    result = iso_init_with_flag(1);
    if (result >= 0)
      iso_set_msgs_severities(sev_queue, sev_print, print_id);
    // Never iso_finish(): another thread may be building, and the process
    // ends anyway.
  });
  return result;
}

// Drains libisofs's message queue: returns the texts of what is queued,
// "; "-separated. Called with build_mutex held, at the start of a build (to
// drop anything stale) and at its end (so the queue never grows).
std::string drain_messages() {
  std::string out;
  int code = 0;
  int image_id = 0;
  char text[ISO_MSGS_MESSAGE_LEN];
  char severity[80];
  while (iso_obtain_msgs(sev_all, &code, &image_id, text, severity) == 1) {
    text[sizeof text - 1] = '\0';
    if (!out.empty())
      out += "; ";
    out += text;
  }
  return out;
}

caf::error iso_failure(std::string_view step, int rc) {
  std::string text = "cloud-init seed: " + std::string{step} + ": ";
  const char* msg = iso_error_to_msg(rc);
  text += msg != nullptr ? msg : "libisofs error";
  if (auto queued = drain_messages(); !queued.empty())
    text += " (" + queued + ")";
  return make_error(ec::invalid_argument, std::move(text));
}

// -- RAII for libisofs's handles ----------------------------------------------

struct image_unref {
  void operator()(IsoImage* p) const { iso_image_unref(p); }
};
struct opts_free {
  void operator()(IsoWriteOpts* p) const { iso_write_opts_free(p); }
};
struct stream_unref {
  void operator()(IsoStream* p) const { iso_stream_unref(p); }
};
// free_data() stops the writer thread if it still runs (we stopped reading
// early, on an error) and joins it, then frees the writer's state; the
// struct itself was calloc'ed by libisofs and is ours to free.
struct source_free {
  void operator()(burn_source* p) const {
    p->free_data(p);
    std::free(p);
  }
};

using image_ptr = std::unique_ptr<IsoImage, image_unref>;
using opts_ptr = std::unique_ptr<IsoWriteOpts, opts_free>;
using stream_ptr = std::unique_ptr<IsoStream, stream_unref>;
using source_ptr = std::unique_ptr<burn_source, source_free>;

void fix_times(IsoNode* node) {
  iso_node_set_atime(node, seed_timestamp);
  iso_node_set_mtime(node, seed_timestamp);
  iso_node_set_ctime(node, seed_timestamp);
}

// Adds `name` holding a copy of `content` to the image's root.
caf::error add_file(IsoImage* image, const char* name, const std::string& content) {
  // The memory stream takes a malloc'ed buffer and free()s it; malloc(0) may
  // return NULL, which the stream refuses, so an empty file gets 1 byte.
  auto* buf = static_cast<unsigned char*>(std::malloc(content.empty() ? 1 : content.size()));
  if (buf == nullptr)
    return make_error(ec::invalid_argument,
                      std::string{"cloud-init seed: "} + name + ": out of memory");
  if (!content.empty())
    std::memcpy(buf, content.data(), content.size());
  IsoStream* raw_stream = nullptr;
  if (int rc = iso_memory_stream_new(buf, content.size(), &raw_stream); rc < 0) {
    std::free(buf); // not taken on failure
    return iso_failure(std::string{"stream for "} + name, rc);
  }
  stream_ptr stream{raw_stream};
  IsoFile* file = nullptr;
  if (int rc = iso_image_add_new_file(image, iso_image_get_root(image), name,
                                      stream.get(), &file);
      rc < 0)
    return iso_failure(std::string{"add "} + name, rc);
  stream.release(); // the file holds the reference now
  fix_times(reinterpret_cast<IsoNode*>(file));
  return {};
}

// Every option that could make two builds of the same files differ is set
// explicitly, rather than trusted to a profile's defaults.
caf::expected<opts_ptr> write_options() {
  IsoWriteOpts* raw = nullptr;
  if (int rc = iso_write_opts_new(&raw, 0); rc < 0)
    return iso_failure("write options", rc);
  opts_ptr opts{raw};
  auto check = [](int rc, const char* what) -> caf::error {
    return rc < 0 ? iso_failure(what, rc) : caf::error{};
  };
  // Level 2: 31-character ISO names, so the plain tree reads USER_DATA.;1
  // rather than 8.3's USER_DAT.;1 for a reader without Rock Ridge or Joliet.
  if (auto err = check(iso_write_opts_set_iso_level(raw, 2), "iso level"))
    return err;
  if (auto err = check(iso_write_opts_set_rockridge(raw, 1), "rock ridge"))
    return err;
  if (auto err = check(iso_write_opts_set_joliet(raw, 1), "joliet"))
    return err;
  // Joliet needs no dot in a name: "user-data;1" as genisoimage writes it,
  // not libisofs's default "user-data.;1" (Linux strips the dot, other
  // readers need not).
  if (auto err = check(iso_write_opts_set_no_force_dots(raw, 2), "joliet dots"))
    return err;
  // The volume id as given ("cidata"), not uppercased to d-characters.
  if (auto err = check(iso_write_opts_set_relaxed_vol_atts(raw, 1), "relaxed volume id"))
    return err;
  // Modes and owners: fixed, not the builder's uid and gid.
  if (auto err = check(iso_write_opts_set_replace_mode(raw, 2, 2, 2, 2), "replace mode"))
    return err;
  if (auto err = check(iso_write_opts_set_default_dir_mode(raw, 0555), "dir mode"))
    return err;
  if (auto err = check(iso_write_opts_set_default_file_mode(raw, 0444), "file mode"))
    return err;
  if (auto err = check(iso_write_opts_set_default_uid(raw, 0), "uid"))
    return err;
  if (auto err = check(iso_write_opts_set_default_gid(raw, 0), "gid"))
    return err;
  // Times: Rock Ridge TF entries, the directory records of both trees and
  // the volume descriptors all carry seed_timestamp, in UTC. (libisofs 1.5
  // also derives its "time of writing" from the volume times; earlier ones
  // used the clock. Directory records are pinned either way.)
  if (auto err = check(iso_write_opts_set_replace_timestamps(raw, 2), "replace timestamps"))
    return err;
  if (auto err = check(iso_write_opts_set_default_timestamp(raw, seed_timestamp), "timestamp"))
    return err;
  if (auto err = check(iso_write_opts_set_dir_rec_mtime(raw, 1 | 2), "dir record time"))
    return err;
  if (auto err = check(iso_write_opts_set_always_gmt(raw, 1), "always gmt"))
    return err;
  char no_uuid[] = "";
  if (auto err = check(iso_write_opts_set_pvd_times(raw, seed_timestamp, seed_timestamp, 0, 0,
                                                    no_uuid),
                       "volume times"))
    return err;
  // The ring buffer between the writer thread and us: 32 blocks (64 KiB,
  // libisofs's minimum) instead of 2 MiB; a seed is a few blocks.
  if (auto err = check(iso_write_opts_set_fifo_size(raw, 32), "fifo size"))
    return err;
  return opts;
}

} // namespace

caf::expected<std::string> build_seed_iso(const seed_files& files) {
  if (int rc = init_libisofs(); rc < 0)
    return make_error(ec::invalid_argument,
                      std::string{"cloud-init seed: libisofs init failed: "}
                        + iso_error_to_msg(rc));
  std::lock_guard<std::mutex> guard{build_mutex};
  drain_messages();
  // Runs after the handles below are freed (declared first): their release
  // may queue messages too.
  struct drain_at_end {
    ~drain_at_end() { drain_messages(); }
  } drain_guard;

  IsoImage* raw_image = nullptr;
  if (int rc = iso_image_new(seed_volume_id, &raw_image); rc < 0)
    return iso_failure("new image", rc);
  image_ptr image{raw_image};
  fix_times(reinterpret_cast<IsoNode*>(iso_image_get_root(raw_image)));
  // Added in a fixed order; libisofs sorts directory records by name anyway.
  if (auto err = add_file(raw_image, "meta-data", files.meta_data))
    return err;
  if (auto err = add_file(raw_image, "user-data", files.user_data))
    return err;
  if (!files.network_config.empty())
    if (auto err = add_file(raw_image, "network-config", files.network_config))
      return err;

  auto opts = write_options();
  if (!opts)
    return opts.error();
  burn_source* raw_source = nullptr;
  if (int rc = iso_image_create_burn_source(raw_image, opts->get(), &raw_source); rc < 0)
    return iso_failure("start writer", rc);
  source_ptr source{raw_source};

  // The size is known before the first byte: the layout is computed up front.
  std::string out;
  auto total = source->get_size(source.get());
  constexpr int block = 2048;
  if (total <= 0 || total % block != 0)
    return make_error(ec::invalid_argument, "cloud-init seed: writer announced "
                                              + std::to_string(total) + " bytes");
  out.resize(static_cast<size_t>(total));
  size_t pos = 0;
  for (;;) {
    // Never past the announced size: a block that does not fit goes to
    // `spare`, and arriving there at all is an error.
    unsigned char spare[block];
    bool fits = pos + block <= out.size();
    auto* dst = fits ? reinterpret_cast<unsigned char*>(out.data() + pos) : spare;
    int n = source->read_xt(source.get(), dst, block);
    if (n == 0)
      break;
    if (n < 0)
      return iso_failure("write image after " + std::to_string(pos) + " bytes",
                         ISO_BUF_READ_ERROR);
    if (!fits)
      return make_error(ec::invalid_argument,
                        "cloud-init seed: writer delivered more than the "
                          + std::to_string(total) + " bytes it announced");
    pos += static_cast<size_t>(n);
  }
  if (pos != out.size())
    return make_error(ec::invalid_argument, "cloud-init seed: writer ended after "
                                              + std::to_string(pos) + " of "
                                              + std::to_string(total) + " bytes");
  return out;
}

// -- render_seed ---------------------------------------------------------------

namespace {

bool alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

caf::error invalid(std::string_view field, std::string_view value, std::string_view why) {
  return make_error(ec::invalid_argument, "proxy_seed." + std::string{field} + ": "
                                            + quote(value) + " " + std::string{why});
}

caf::error check_instance_id(std::string_view v) {
  bool ok = !v.empty() && v.size() <= 128 && alnum(v.front());
  for (size_t i = 0; ok && i < v.size(); ++i)
    ok = alnum(v[i]) || v[i] == '.' || v[i] == '_' || v[i] == '-';
  if (ok)
    return {};
  return invalid("instance_id", v,
                 "is not a valid instance id (1..128 of [A-Za-z0-9._-], starting with "
                 "a letter or digit)");
}

caf::error check_hostname(std::string_view v) {
  bool ok = !v.empty() && v.size() <= 64;
  size_t start = 0;
  while (ok) {
    auto end = v.find('.', start);
    auto label = v.substr(start, end == std::string_view::npos ? v.npos : end - start);
    ok = !label.empty() && label.size() <= 63 && alnum(label.front()) && alnum(label.back());
    for (size_t i = 0; ok && i < label.size(); ++i)
      ok = alnum(label[i]) || label[i] == '-';
    if (end == std::string_view::npos)
      break;
    start = end + 1;
  }
  if (ok)
    return {};
  return invalid("hostname", v,
                 "is not a valid host name (dot-separated labels of [A-Za-z0-9-], "
                 "1..63 each, no '-' at either end; at most 64 characters)");
}

} // namespace

caf::expected<seed_files> render_seed(const proxy_seed& p) {
  if (auto err = check_instance_id(p.instance_id))
    return err;
  if (auto err = check_hostname(p.hostname))
    return err;
  if (p.port == 0)
    return make_error(ec::invalid_argument, "proxy_seed.port: 0 is not a valid port (1..65535)");
  if (auto err = check_cidr("proxy_seed.allow_cidr", p.allow_cidr))
    return err;

  seed_files out;
  out.meta_data = "instance-id: '" + p.instance_id + "'\n"
                  "local-hostname: '" + p.hostname + "'\n";
  out.user_data = "#cloud-config\n"
                  "write_files:\n"
                  "  - path: " + std::string{proxy_env_path} + "\n"
                  "    owner: root:root\n"
                  "    permissions: '0644'\n"
                  "    content: |\n"
                  "      EGRESS_INSTANCE_ID=" + p.instance_id + "\n"
                  "      EGRESS_PORT=" + std::to_string(p.port) + "\n"
                  "      EGRESS_ALLOW_CIDR=" + p.allow_cidr + "\n";
  out.network_config = "version: 2\n"
                       "ethernets:\n"
                       "  nic0:\n"
                       "    match:\n"
                       "      name: 'e*'\n"
                       "    dhcp4: true\n";
  return out;
}

} // namespace egress::cloudinit
