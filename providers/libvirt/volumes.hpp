#pragma once
// Storage volume operations: create, delete, upload. Synchronous and
// blocking (an upload moves the whole image before it returns): called only
// from detached call actors, never on a scheduler thread.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "providers/libvirt/connection.hpp"

namespace egress::lv {

/// Creates volume `name` in the (active) storage pool `pool`: `capacity_bytes`
/// large, `format` "raw" or "qcow2". A raw volume is created sparse
/// (allocation 0), so creating it costs nothing whatever its size. Names are
/// checked against name_pattern first (ec::invalid_name); an unknown format
/// or a zero capacity is ec::invalid_argument; a missing pool is
/// ec::no_pool; a volume that already exists is libvirt's error, classified
/// (permanent).
caf::expected<volume_ptr> create_volume(connection& c, const std::string& pool,
                                        const std::string& name,
                                        uint64_t capacity_bytes,
                                        const std::string& format);

/// Deletes volume `name` from `pool`. A volume that does not exist (or
/// vanishes while we look) is success: the goal state is reached. A missing
/// pool is ec::no_pool.
caf::error delete_volume(connection& c, const std::string& pool,
                         const std::string& name);

/// Names of the volumes in `pool` that start with `prefix` (sorted). Reads
/// the pool's list as libvirt has it (no refresh). A missing pool is
/// ec::no_pool.
caf::expected<std::vector<std::string>> list_volumes(connection& c, const std::string& pool,
                                                     const std::string& prefix);

/// The image source of an upload: fills `buf` with up to `cap` bytes and
/// returns how many it wrote; 0 means the source has ended. An error aborts
/// the upload, and that very error is what upload_volume returns.
using upload_source = std::function<caf::expected<size_t>(char* buf, size_t cap)>;

/// Bytes per virStreamSend, i.e. per libvirt stream packet.
///
/// Measured (bench/upload.cpp; libvirt 9.0, glibc 2.36, 2-vCPU VM): libvirtd
/// allocates a buffer per packet, and for packets above 256 KiB glibc kept
/// returning the heap to the kernel and faulting it back in. On the unix
/// socket, a fresh daemon took 1 MiB packets at ~200 MiB/s and 4 MiB ones at
/// ~100, but 256 KiB ones at ~900; with larger glibc.malloc trim/mmap
/// thresholds in libvirtd, 1 MiB ran at 1000-1700 MiB/s. 256 KiB is also
/// what virsh sends (libvirt's legacy payload maximum).
inline constexpr size_t default_upload_chunk = size_t{256} << 10;
inline constexpr size_t min_upload_chunk = size_t{256} << 10;
/// Well inside libvirt's 32 MiB RPC message limit (VIR_NET_MESSAGE_MAX).
inline constexpr size_t max_upload_chunk = size_t{8} << 20;

/// Uploads `length` bytes from `read` into `vol` at byte `offset`
/// (virStorageVolUpload + virStreamSend + virStreamFinish). Each packet is a
/// full `chunk` (the source is read until the chunk is full, so a source
/// that returns small pieces still makes large packets) except the last.
/// `length` 0 means "until the source ends" (libvirt's own meaning).
///
/// Errors:
/// - `chunk` outside [min_upload_chunk, max_upload_chunk], or a source that
///   claims more than it was offered: ec::invalid_argument, before or
///   instead of sending anything more;
/// - the source fails: the stream is aborted (virStreamAbort) and the
///   source's own error is returned, unchanged;
/// - the source ends before `length` bytes: the stream is aborted,
///   ec::invalid_argument ("source ended after X of Y bytes");
/// - libvirt fails (stream, send, finish): the stream is aborted and
///   libvirt's error is returned, classified (lv::last_error), e.g.
///   connection_broken when the link dies under the upload.
/// The stream is freed on every path (also if `read` throws). A failed
/// upload leaves the volume in place with partial content: the caller
/// decides whether to delete it.
///
/// If `sent` is given it holds the bytes libvirt accepted, kept current
/// while the upload runs (a caller that abandoned a blocked upload reads
/// how far it got): on success the whole upload, on failure up to where it
/// stopped.
caf::error upload_volume(connection& c, virStorageVolPtr vol, uint64_t offset,
                         uint64_t length, const upload_source& read,
                         size_t chunk = default_upload_chunk,
                         std::atomic<uint64_t>* sent = nullptr);

/// The same, looking the volume up first: ec::no_pool / ec::no_volume if
/// either is missing.
caf::error upload_volume(connection& c, const std::string& pool,
                         const std::string& name, uint64_t offset, uint64_t length,
                         const upload_source& read,
                         size_t chunk = default_upload_chunk,
                         std::atomic<uint64_t>* sent = nullptr);

/// What an upload gave the volume: `sent` bytes from its offset, holes
/// included, `holes` of them as holes.
struct upload_tally {
  uint64_t sent = 0;
  uint64_t holes = 0;
};

/// upload_volume (pool and name, default chunk) into a volume that reads as
/// zeros from byte `zeros_from` on (such as one created for this upload,
/// `zeros_from` 0, or one shorter than the upload's end, its length): a
/// packet of the source that is all zeros and starts there or later is not
/// sent but becomes part of a hole (VIR_STORAGE_VOL_UPLOAD_SPARSE_STREAM,
/// one message however long), so a raw disk image moves only its data and
/// stays sparse on the host. A daemon that refuses the flag (libvirt before
/// 3.4) gets every byte, as upload_volume sends them. `tally`, if given, is
/// filled when it returns.
///
/// Only into zeros: libvirtd makes a hole in a file with lseek and
/// ftruncate at the hole's end (virfdstream.c), so the bytes the hole skips
/// keep what the file held there, everything past the hole's end is cut
/// off, and while the upload runs the file is as long as the daemon got
/// (once a hole was sent). That is also why several streams into one
/// volume (ranged_upload.hpp) never send holes
/// (docs/notes/transport.md#holes).
caf::error upload_volume_sparse(connection& c, const std::string& pool,
                                const std::string& name, uint64_t offset, uint64_t length,
                                uint64_t zeros_from, const upload_source& read,
                                upload_tally* tally = nullptr);

/// What libvirt reports of a volume (virStorageVolGetInfo, the same with
/// VIR_STORAGE_VOL_GET_PHYSICAL, and GetPath).
///
/// Capacity is not a length: libvirt reads the volume's header on a pool
/// refresh, and for a file that holds a qcow2 image it reports the image's
/// virtual size as the capacity, whatever format the volume was created
/// with. The byte length is the physical size (for a file, its st_size),
/// which means the same for every format.
struct volume_facts {
  uint64_t length = 0;     // bytes in the volume (physical size)
  uint64_t capacity = 0;   // the disk a guest would see (virtual size for qcow2)
  uint64_t allocation = 0; // bytes backed by storage: for a sparse file
                           // written from the start, how far an upload got
  std::string path;        // the target path on the host
};

/// The facts of `pool`/`name`, or nullopt if the volume does not exist. A
/// missing pool is ec::no_pool. Refreshes the pool first (a dir pool caches
/// allocation from its last refresh).
caf::expected<std::optional<volume_facts>> volume_info(connection& c, const std::string& pool,
                                                       const std::string& name);

/// Creates `name` in `pool` as a qcow2 overlay on `backing` (a path on the
/// host, e.g. a cached image's data volume) of format `backing_format` (qcow2
/// or raw), `capacity` bytes large: the base's virtual size, which the
/// caller knows from the image's verified header (libvirt's own capacity of
/// the base depends on whether the pool was refreshed since the upload).
/// Writes go to the overlay; the base is never written. A backing path no
/// volume has is ec::no_volume; capacity 0 is ec::invalid_argument.
caf::expected<volume_ptr> create_overlay(connection& c, const std::string& pool,
                                         const std::string& name, const std::string& backing,
                                         const std::string& backing_format,
                                         uint64_t capacity);

/// Where downloaded bytes go: an error stops the download (the stream is
/// aborted) and is returned unchanged.
using download_sink = std::function<caf::error(const char* data, size_t size)>;

/// Reads `length` bytes of `pool`/`name` from `offset` (virStorageVolDownload
/// + virStreamRecv) into `sink`. The image cache reads back the prefix a
/// resumed upload did not send in this run, so that its digest covers the
/// whole volume. Errors as upload_volume; `length` must not be 0.
caf::error download_volume(connection& c, const std::string& pool, const std::string& name,
                           uint64_t offset, uint64_t length, const download_sink& sink);

/// Reads `pool`/`name` from `offset` for at most `length` bytes into `sink`,
/// stopping at the first hole (a sparse download, virStreamRecvFlags with
/// VIR_STREAM_RECV_STOP_AT_HOLE), and returns how many bytes came before it:
/// in a sparse volume written from `offset` on, how far the writer got. A
/// file system that reports no holes makes every byte look written (the
/// caller's digest then catches what was never written).
caf::expected<uint64_t> read_written_prefix(connection& c, const std::string& pool,
                                            const std::string& name, uint64_t offset,
                                            uint64_t length, const download_sink& sink);

} // namespace egress::lv
