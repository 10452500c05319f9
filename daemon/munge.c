/* munge.c -- MUNGE credentials through libmunge.so.2, loaded when first
 * needed (munge.h). The few calls and constants used are MUNGE's stable
 * interface (munge.h of MUNGE 0.5). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "munge.h"

enum { /* munge_opt_t */
  OPT_CIPHER_TYPE = 0,
  OPT_TTL = 4,
  OPT_SOCKET = 8,
  OPT_UID_RESTRICTION = 9
};
#define CIPHER_AES128 4

typedef void *munge_ctx;
static struct {
  munge_ctx (*ctx_create)(void);
  void (*ctx_destroy)(munge_ctx);
  int (*ctx_set)(munge_ctx, int, ...);
  const char *(*ctx_strerror)(munge_ctx);
  int (*encode)(char **, munge_ctx, const void *, int);
  int (*decode)(const char *, munge_ctx, void **, int *, uid_t *, gid_t *);
  const char *(*strerror)(int);
  char why[256];
  int ok;
} m;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  void *h = dlopen("libmunge.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    hc_fmt(m.why, sizeof m.why, "MUNGE's library libmunge.so.2 cannot be "
           "loaded (Debian: apt-get install munge): %s", dlerror());
    return;
  }
  *(void **)&m.ctx_create = dlsym(h, "munge_ctx_create");
  *(void **)&m.ctx_destroy = dlsym(h, "munge_ctx_destroy");
  *(void **)&m.ctx_set = dlsym(h, "munge_ctx_set");
  *(void **)&m.ctx_strerror = dlsym(h, "munge_ctx_strerror");
  *(void **)&m.encode = dlsym(h, "munge_encode");
  *(void **)&m.decode = dlsym(h, "munge_decode");
  *(void **)&m.strerror = dlsym(h, "munge_strerror");
  if (!m.ctx_create || !m.ctx_destroy || !m.ctx_set || !m.ctx_strerror ||
      !m.encode || !m.decode || !m.strerror) {
    hc_fmt(m.why, sizeof m.why, "libmunge.so.2 lacks a function hora "
           "needs (MUNGE 0.5 or later is)");
    dlclose(h);
    return;
  }
  m.ok = 1; /* (the library stays loaded) */
}

int hd_munge_available(char *why, size_t whylen) {
  pthread_once(&once, load);
  if (m.ok) return 0;
  hc_fmt(why, whylen, "%s", m.why);
  return -1;
}

/* The reason MUNGE gives for err on ctx. */
static void reason(munge_ctx c, int err, const char *what, char *why,
                   size_t whylen) {
  const char *s = c ? m.ctx_strerror(c) : NULL;
  hc_fmt(why, whylen, "%s: %s", what, s ? s : m.strerror(err));
}

static munge_ctx context(const char *socket, char *why, size_t whylen) {
  munge_ctx c = m.ctx_create();
  if (!c) {
    hc_fmt(why, whylen, "out of memory");
    return NULL;
  }
  int err = m.ctx_set(c, OPT_SOCKET, socket ? socket : HD_MUNGE_SOCKET);
  if (err) {
    reason(c, err, "MUNGE's socket option", why, whylen);
    m.ctx_destroy(c);
    return NULL;
  }
  return c;
}

int hd_munge_encode(const char *socket, const void *payload, int len,
                    uid_t decoder, int ttl, char **cred, char *why,
                    size_t whylen) {
  *cred = NULL;
  if (hd_munge_available(why, whylen) < 0) return -1;
  munge_ctx c = context(socket, why, whylen);
  if (!c) return -1;
  int err = m.ctx_set(c, OPT_CIPHER_TYPE, CIPHER_AES128);
  if (!err && decoder != (uid_t)-1)
    err = m.ctx_set(c, OPT_UID_RESTRICTION, decoder);
  if (!err && ttl > 0) err = m.ctx_set(c, OPT_TTL, ttl);
  if (!err) err = m.encode(cred, c, payload, len);
  if (err) {
    reason(c, err, "MUNGE could not make a credential", why, whylen);
    free(*cred);
    *cred = NULL;
  }
  m.ctx_destroy(c);
  return err ? -1 : 0;
}

int hd_munge_decode(const char *socket, const char *cred, void **payload,
                    int *len, uid_t *uid, gid_t *gid, char *why,
                    size_t whylen) {
  *payload = NULL;
  *len = 0;
  *uid = (uid_t)-1;
  *gid = (gid_t)-1;
  if (hd_munge_available(why, whylen) < 0) return -1;
  munge_ctx c = context(socket, why, whylen);
  if (!c) return -1;
  void *p = NULL;
  int n = 0;
  int err = m.decode(cred, c, &p, &n, uid, gid);
  if (err) {
    reason(c, err, "munged", why, whylen);
    free(p);
    m.ctx_destroy(c);
    return err > 0 ? err : -1;
  }
  m.ctx_destroy(c);
  /* a copy that ends in NUL whatever the credential held */
  char *q = malloc((size_t)n + 1);
  if (!q) {
    free(p);
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  if (n) memcpy(q, p, (size_t)n);
  q[n] = '\0';
  free(p);
  *payload = q;
  *len = n;
  return 0;
}
