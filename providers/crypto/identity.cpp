#include "providers/crypto/identity.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "messages/error.hpp"
#include "providers/crypto/secret.hpp"

namespace egress::crypto {

namespace {

namespace fs = std::filesystem;

struct pkey_free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct x509_free {
  void operator()(X509* p) const { X509_free(p); }
};
struct bio_free {
  void operator()(BIO* p) const { BIO_free(p); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;
using bio_ptr = std::unique_ptr<BIO, bio_free>;

constexpr long ten_years = 10L * 365 * 24 * 3600;

caf::error failed(const std::string& what) {
  return make_error(ec::access_denied, "inspector identity: " + what);
}

bool add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr)
    return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key` with common name `cn`, signed by `signer` (its own
// key when issuer is null: self-signed).
x509_ptr make_certificate(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* signer,
                          bool ca) {
  x509_ptr cert{X509_new()};
  if (!cert)
    return nullptr;
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1)
    return nullptr;
  serial[0] &= 0x7f; // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  bool ok = bn != nullptr && X509_set_version(cert.get(), 2) == 1
            && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) != nullptr
            && X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr
            && X509_gmtime_adj(X509_getm_notAfter(cert.get()), ten_years) != nullptr
            && X509_set_pubkey(cert.get(), key) == 1;
  BN_free(bn);
  if (!ok)
    return nullptr;
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(cn), -1, -1, 0)
      != 1)
    return nullptr;
  X509* from = issuer != nullptr ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(from)) != 1)
    return nullptr;
  if (!add_extension(cert.get(), from, NID_basic_constraints,
                     ca ? "critical,CA:TRUE,pathlen:0" : "critical,CA:FALSE")
      || !add_extension(cert.get(), from, NID_key_usage,
                        ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature")
      || (!ca && !add_extension(cert.get(), from, NID_ext_key_usage, "serverAuth,clientAuth")))
    return nullptr;
  if (X509_sign(cert.get(), signer, EVP_sha256()) == 0)
    return nullptr;
  return cert;
}

// Writes `pem` into `path` with `mode`, creating it (never following or
// reusing an existing file).
caf::error write_file(const std::string& path, const std::string& pem, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return failed("cannot create " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < pem.size()) {
    auto n = ::write(fd, pem.data() + done, pem.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ::close(fd);
      return failed("cannot write " + path + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    return failed("cannot write " + path + ": " + std::strerror(errno));
  return {};
}

std::string pem_of(X509* cert) {
  bio_ptr bio{BIO_new(BIO_s_mem())};
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1)
    return {};
  char* data = nullptr;
  auto n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string pem_of(EVP_PKEY* key) {
  bio_ptr bio{BIO_new(BIO_s_mem())};
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return {};
  char* data = nullptr;
  auto n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

identity_files files_in(const std::string& dir) {
  return {dir, dir + "/ca.pem", dir + "/identity.pem", dir + "/identity.key"};
}

// Makes a fresh identity in `tmp` (an empty directory of ours).
caf::error make_identity(const std::string& tmp) {
  pkey_ptr ca_key{EVP_EC_gen("P-256")};
  pkey_ptr key{EVP_EC_gen("P-256")};
  if (!ca_key || !key)
    return failed("cannot generate a P-256 key");
  auto ca = make_certificate(ca_key.get(), "egress engine inspector CA", nullptr, ca_key.get(),
                             true);
  if (!ca)
    return failed("cannot make the CA certificate");
  auto cert = make_certificate(key.get(), "egress engine inspector", ca.get(), ca_key.get(),
                               false);
  if (!cert)
    return failed("cannot make the certificate");
  auto f = files_in(tmp);
  auto key_pem = pem_of(key.get());
  if (key_pem.empty())
    return failed("cannot encode the key");
  if (auto err = write_file(f.key, key_pem, 0600))
    return err;
  if (auto err = write_file(f.certificate, pem_of(cert.get()), 0644))
    return err;
  return write_file(f.ca, pem_of(ca.get()), 0644); // the CA's key is dropped here
}

caf::error check_private(const std::string& path, bool dir) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0)
    return make_error(ec::invalid_argument, "inspector identity: " + path + ": "
                                              + std::strerror(errno));
  if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return failed(path + " is not a " + (dir ? "directory" : "regular file"));
  if (st.st_uid != ::geteuid() && ::geteuid() != 0)
    return failed(path + " belongs to another user");
  auto loose = dir ? (st.st_mode & 0022) : (st.st_mode & 0077);
  if (loose != 0)
    return failed(path + (dir ? " may be written by others than its owner: chmod 700 it"
                              : " may be read by others than its owner: chmod 600 it"));
  return {};
}

} // namespace

caf::expected<identity_files> load_identity(const std::string& dir) {
  if (auto err = check_private(dir, true))
    return err;
  auto f = files_in(dir);
  if (auto err = check_private(f.key, false))
    return err;
  for (auto& p : {f.ca, f.certificate}) {
    struct stat st{};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      return make_error(ec::invalid_argument, "inspector identity: " + p + " is missing");
  }
  return f;
}

caf::expected<identity_files> ensure_identity(const std::string& dir) {
  if (dir.empty() || dir.front() != '/')
    return make_error(ec::invalid_argument,
                      "inspector identity: " + dir + " is not an absolute path");
  std::error_code ec;
  if (fs::exists(dir, ec))
    return load_identity(dir);
  auto parent = fs::path{dir}.parent_path();
  fs::create_directories(parent, ec);
  if (ec)
    return failed("cannot create " + parent.string() + ": " + ec.message());
  auto tmp = dir + ".new-" + random_hex(6);
  if (::mkdir(tmp.c_str(), 0700) != 0)
    return failed("cannot create " + tmp + ": " + std::strerror(errno));
  auto err = make_identity(tmp);
  // rename(2) of a directory onto an existing non-empty one fails: whoever
  // renamed first made the identity, and every process uses that one.
  if (!err && ::rename(tmp.c_str(), dir.c_str()) != 0 && errno != EEXIST && errno != ENOTEMPTY)
    err = failed("cannot move " + tmp + " to " + dir + ": " + std::strerror(errno));
  fs::remove_all(tmp, ec);
  if (err)
    return err;
  return load_identity(dir);
}

std::string default_identity_dir() {
  auto env = [](const char* name) -> std::string {
    auto v = std::getenv(name);
    return v != nullptr && v[0] == '/' ? std::string{v} : std::string{};
  };
  if (auto s = env("STATE_DIRECTORY"); !s.empty())
    return s.substr(0, s.find(':')) + "/inspect"; // systemd may list several
  if (auto s = env("XDG_STATE_HOME"); !s.empty())
    return s + "/egress-engine/inspect";
  if (auto s = env("HOME"); !s.empty())
    return s + "/.local/state/egress-engine/inspect";
  return "/var/lib/egress/inspect";
}

} // namespace egress::crypto
