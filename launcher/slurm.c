/* slurm.c -- the hosts of a Slurm allocation (see slurm.h). */
#include "slurm.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void hr_slurm_names_free(char **names, size_t n) {
  for (size_t i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

/* A growing list of names. */
struct names {
  char **v;
  size_t n, cap;
};

static int names_push(struct names *l, char *s) {
  if (!s) return -1;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    char **v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      free(s);
      return -1;
    }
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = s;
  return 0;
}

static char *join2(const char *a, const char *b, size_t blen) {
  size_t al = strlen(a);
  char *s = malloc(al + blen + 1);
  if (!s) return NULL;
  memcpy(s, a, al);
  memcpy(s + al, b, blen);
  s[al + blen] = '\0';
  return s;
}

/* A number of at most 9 digits at *p (its digits' count in *width). */
static int number(const char **p, long *v, int *width) {
  const char *s = *p;
  int k = 0;
  long x = 0;
  while (isdigit((unsigned char)s[k]) && k < 9) x = x * 10 + (s[k++] - '0');
  if (!k || isdigit((unsigned char)s[k])) return -1;
  *v = x;
  *width = k;
  *p = s + k;
  return 0;
}

/* Expands one item ("rack[1-2]-n[01-03]") onto out. */
static int expand_item(const char *item, size_t len, size_t max,
                       struct names *out, char *why, size_t whylen) {
  struct names cur = {0}, next = {0};
  int rc = -1;
  if (names_push(&cur, strdup("")) < 0) goto oom;
  const char *p = item, *end = item + len;
  while (p < end) {
    if (*p != '[') { /* literal text up to the next bracket */
      const char *q = p;
      while (q < end && *q != '[' && *q != ']') q++;
      if (q < end && *q == ']') {
        hc_fmt(why, whylen, "a ']' without its '['");
        goto out;
      }
      for (size_t i = 0; i < cur.n; i++) {
        char *s = join2(cur.v[i], p, (size_t)(q - p));
        if (!s) goto oom;
        free(cur.v[i]);
        cur.v[i] = s;
      }
      p = q;
      continue;
    }
    const char *close = memchr(p, ']', (size_t)(end - p));
    if (!close) {
      hc_fmt(why, whylen, "a '[' without its ']'");
      goto out;
    }
    /* ranges: "a" or "a-b", comma-separated */
    next.n = 0;
    const char *r = p + 1;
    if (r == close) {
      hc_fmt(why, whylen, "an empty '[]'");
      goto out;
    }
    while (r < close) {
      long lo, hi;
      int w, w2;
      if (number(&r, &lo, &w) < 0) goto bad_range;
      hi = lo;
      if (*r == '-') {
        r++;
        if (number(&r, &hi, &w2) < 0 || hi < lo) goto bad_range;
      }
      if (r < close && *r != ',') goto bad_range;
      if (*r == ',') {
        r++;
        if (r == close) goto bad_range;
      }
      for (long v = lo; v <= hi; v++) {
        char num[16];
        int k = snprintf(num, sizeof num, "%0*ld", w, v);
        for (size_t i = 0; i < cur.n; i++) {
          if (out->n + next.n >= max) {
            hc_fmt(why, whylen, "more than %zu hosts", max);
            goto out;
          }
          if (names_push(&next, join2(cur.v[i], num, (size_t)k)) < 0)
            goto oom;
        }
      }
    }
    { /* next holds prefix x value, value-major: put it prefix-major */
      size_t nv = next.n / cur.n;
      char **v = malloc(next.n * sizeof *v);
      if (!v) goto oom;
      for (size_t j = 0; j < nv; j++)
        for (size_t i = 0; i < cur.n; i++) v[i * nv + j] = next.v[j * cur.n + i];
      hr_slurm_names_free(cur.v, cur.n);
      cur.v = v;
      cur.n = cur.cap = next.n;
      free(next.v);
      next.v = NULL;
      next.n = next.cap = 0;
    }
    p = close + 1;
    continue;
  bad_range:
    hc_fmt(why, whylen, "a bad range in '%.*s' (expected numbers like "
           "01-04,07)", (int)(close - p + 1), p);
    goto out;
  }
  for (size_t i = 0; i < cur.n; i++) {
    if (out->n >= max) {
      hc_fmt(why, whylen, "more than %zu hosts", max);
      goto out;
    }
    if (names_push(out, cur.v[i]) < 0) {
      cur.v[i] = NULL;
      goto oom;
    }
    cur.v[i] = NULL;
  }
  rc = 0;
  goto out;
oom:
  hc_fmt(why, whylen, "out of memory");
out:
  hr_slurm_names_free(cur.v, cur.n);
  hr_slurm_names_free(next.v, next.n);
  return rc;
}

int hr_slurm_hostlist(const char *spec, size_t max, char ***names, size_t *n,
                      char *err, size_t errlen) {
  struct names out = {0};
  char why[256];
  *names = NULL;
  *n = 0;
  const char *p = spec;
  while (*p) {
    const char *q = p;
    int depth = 0;
    while (*q && (depth || *q != ',')) {
      if (*q == '[') depth++;
      else if (*q == ']' && depth) depth--;
      q++;
    }
    if (q == p) {
      hc_fmt(why, sizeof why, "an empty name");
      goto bad;
    }
    if (expand_item(p, (size_t)(q - p), max, &out, why, sizeof why) < 0)
      goto bad;
    p = *q ? q + 1 : q;
    if (*q && !*p) {
      hc_fmt(why, sizeof why, "an empty name");
      goto bad;
    }
  }
  if (!out.n) {
    hc_fmt(why, sizeof why, "no host");
    goto bad;
  }
  *names = out.v;
  *n = out.n;
  return 0;
bad:
  hc_fmt(err, errlen, "'%.200s': %s", spec, why);
  hr_slurm_names_free(out.v, out.n);
  return -1;
}

int hr_slurm_tasks(const char *spec, int *counts, size_t n, char *err,
                   size_t errlen) {
  size_t k = 0;
  const char *p = spec;
  while (*p) {
    long v, rep = 1;
    int w;
    if (number(&p, &v, &w) < 0 || v < 1 || v > HR_SLOTS_MAX) goto bad;
    if (*p == '(') {
      if (p[1] != 'x') goto bad;
      p += 2;
      if (number(&p, &rep, &w) < 0 || rep < 1 || *p != ')') goto bad;
      p++;
    }
    if (*p == ',') {
      p++;
      if (!*p) goto bad;
    } else if (*p) {
      goto bad;
    }
    for (long i = 0; i < rep; i++) {
      if (k >= n) {
        hc_fmt(err, errlen, "'%.200s' gives tasks to more than the %zu nodes",
               spec, n);
        return -1;
      }
      counts[k++] = (int)v;
    }
  }
  if (k != n) {
    hc_fmt(err, errlen, "'%.200s' gives tasks to %zu nodes, not %zu", spec, k,
           n);
    return -1;
  }
  return 0;
bad:
  hc_fmt(err, errlen, "'%.200s': expected counts like 2(x3),1", spec);
  return -1;
}

int hr_slurm_hosts(const char *nodelist, const char *tasks,
                   struct hr_host **hosts, size_t *nhosts, char *err,
                   size_t errlen) {
  char **names = NULL, why[512];
  size_t n = 0, cap = 0;
  int *counts = NULL;
  *hosts = NULL;
  *nhosts = 0;
  if (hr_slurm_hostlist(nodelist, HR_HOSTS_MAX, &names, &n, why,
                        sizeof why) < 0) {
    hc_fmt(err, errlen, "SLURM_JOB_NODELIST %s", why);
    return -1;
  }
  if (!(counts = malloc(n * sizeof *counts))) {
    hr_slurm_names_free(names, n);
    hc_fmt(err, errlen, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < n; i++) counts[i] = 1;
  char each[64];
  if (tasks && n > 1 && !strpbrk(tasks, ",(")) {
    /* one number for every node (SLURM_NTASKS_PER_NODE) */
    hc_fmt(each, sizeof each, "%.20s(x%zu)", tasks, n);
    tasks = each;
  }
  if (tasks && *tasks &&
      hr_slurm_tasks(tasks, counts, n, why, sizeof why) < 0) {
    hc_fmt(err, errlen, "SLURM_TASKS_PER_NODE %s (SLURM_JOB_NODELIST has %zu "
           "node%s)", why, n, n == 1 ? "" : "s");
    goto fail;
  }
  for (size_t i = 0; i < n; i++) {
    if (!hr_host_name_ok(names[i])) {
      hc_fmt(err, errlen, "SLURM_JOB_NODELIST '%.200s': bad host name '%s'",
             nodelist, names[i]);
      goto fail;
    }
    struct hr_host h;
    memset(&h, 0, sizeof h);
    h.name = names[i];
    names[i] = NULL; /* hr_hosts_add() takes it */
    h.slots = counts[i];
    if (hr_hosts_add(hosts, nhosts, &cap, &h, why, sizeof why) < 0) {
      hc_fmt(err, errlen, "SLURM_JOB_NODELIST: %s", why);
      goto fail;
    }
  }
  hr_slurm_names_free(names, n);
  free(counts);
  return 0;
fail:
  hr_slurm_names_free(names, n);
  free(counts);
  hr_hosts_free(*hosts, *nhosts);
  *hosts = NULL;
  *nhosts = 0;
  return -1;
}

int hr_slurm_env(const char **nodelist, const char **tasks) {
  const char *l = getenv("SLURM_JOB_NODELIST");
  if (!l || !*l) l = getenv("SLURM_NODELIST");
  if (!l || !*l) return 0;
  const char *t = getenv("SLURM_TASKS_PER_NODE");
  if (!t || !*t) t = getenv("SLURM_NTASKS_PER_NODE");
  *nodelist = l;
  *tasks = t && *t ? t : NULL;
  return 1;
}
