// Linked into caf-run and caf-shell only, and exported from them
// (runtime/openssl_errors.list): CAF 0.17's OpenSSL module calls SSL_read,
// SSL_write, SSL_connect and SSL_accept without clearing OpenSSL's error
// queue first, and leaves a failed session's errors in it. The queue is the
// thread's, and one thread (the middleman's) runs every session, so the next
// session whose SSL_read merely has no data yet sees the stale error, takes
// it for its own and is closed: a shell that quits without a TLS goodbye, or
// any local process that fails a handshake on the inspector's port, cut the
// other nodes' links and the other shells (docs/notes/caf-0.17.md#openssl-error-queue).
// OpenSSL's own rule is to clear the queue before each of these calls; the
// dynamic linker resolves CAF's calls to these functions first, which do
// exactly that and then call OpenSSL's.
#include <dlfcn.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto real = next<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto real = next<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_connect(SSL* ssl) {
  static auto real = next<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

int SSL_accept(SSL* ssl) {
  static auto real = next<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

} // extern "C"
