#include "providers/mirror/sha256.hpp"

#include <memory>
#include <new>
#include <stdexcept>
#include <utility>

#include <openssl/evp.h>

#include "providers/crypto/secret.hpp"

namespace egress::mirror {

namespace {

void check(int ok, const char* what) {
  // EVP fails only on allocation or a broken provider; neither is something
  // a caller could handle per image.
  if (ok != 1)
    throw std::runtime_error(std::string{"OpenSSL sha256: "} + what + " failed");
}

} // namespace

sha256::sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_)
    throw std::bad_alloc{};
  if (EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw std::runtime_error("OpenSSL sha256: EVP_DigestInit_ex failed");
  }
}

sha256::~sha256() {
  EVP_MD_CTX_free(ctx_);
}

sha256::sha256(sha256&& other) noexcept
  : ctx_(std::exchange(other.ctx_, nullptr)), size_(std::exchange(other.size_, 0)) {}

sha256& sha256::operator=(sha256&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(ctx_);
    ctx_ = std::exchange(other.ctx_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void sha256::update(const char* data, size_t n) {
  if (n == 0)
    return;
  check(EVP_DigestUpdate(ctx_, data, n), "EVP_DigestUpdate");
  size_ += n;
}

std::string sha256::hex() const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> copy{EVP_MD_CTX_new(),
                                                               &EVP_MD_CTX_free};
  if (!copy)
    throw std::bad_alloc{};
  check(EVP_MD_CTX_copy_ex(copy.get(), ctx_), "EVP_MD_CTX_copy_ex");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  check(EVP_DigestFinal_ex(copy.get(), md, &len), "EVP_DigestFinal_ex");
  return crypto::to_hex(md, len);
}

std::string sha256_hex(std::string_view data) {
  sha256 h;
  h.update(data);
  return h.hex();
}

} // namespace egress::mirror
