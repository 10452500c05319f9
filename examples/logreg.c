/* logreg.c -- data-parallel training with hora, in one file: logistic
 * regression on a synthetic two-class data set.
 *
 *   build/examples/logreg                       one process, a job of size 1
 *   horarun -np 4 build/examples/logreg --epochs 30
 *
 * The data set is a function of --seed, --samples and --features only:
 * sample j is drawn from its own random stream (seeded with j), so every
 * rank can generate exactly its shard, samples rank, rank+size, ..., and the
 * union over ranks is the same set whatever the number of ranks.
 *
 * Training is mini-batch gradient descent over global batches: batch b holds
 * samples [b*B, (b+1)*B) of the whole set, and each rank computes the
 * gradient *sum* over its members of that batch. hora_allreduce(HORA_SUM)
 * adds the ranks' sums and every rank divides by the batch size. SUM rather
 * than AVERAGE because shards, and a rank's share of a batch, differ in size
 * by one sample when the sizes do not divide evenly: the average of
 * per-rank means would weigh samples unequally. The step is then the same
 * as on one process, up to the order in which floating-point sums are
 * added, so the loss printed is the same for any number of ranks to the
 * printed precision (the last bits of the weights may differ between job
 * sizes; within one job they are identical on every rank, which is checked
 * at the end).
 *
 * The initial weights come from rank 0 through hora_broadcast; the other
 * ranks start from garbage on purpose, so a broadcast that did not happen
 * shows up in the final check. Exit status 0 when the weights are bit-for-
 * bit identical on every rank, 1 otherwise or when a hora call fails. */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hora.h"

struct cfg {
  int epochs;
  long samples;
  int features;
  long batch;
  double lr;
  uint64_t seed;
};

/* ---- deterministic data ---------------------------------------------------
 */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static double uniform(uint64_t *s) {
  return (double)(splitmix64(s) >> 11) * 0x1p-52 - 1.0;
}

/* The stream of sample j (j = -1: the true model), independent of the
 * number of ranks. */
static uint64_t stream(uint64_t seed, long j) {
  uint64_t s = seed ^ ((uint64_t)(j + 1) * 0xd1b54a32d192ed03ull);
  splitmix64(&s);
  return s;
}

/* Sample j: features in [-1, 1), label 1 when the true model's score plus
 * noise is positive (the noise keeps the classes overlapping). */
static void make_sample(const struct cfg *c, const double *truth, long j,
                        double *x, double *y) {
  uint64_t s = stream(c->seed, j);
  double z = truth[c->features];
  for (int k = 0; k < c->features; k++) {
    x[k] = uniform(&s);
    z += truth[k] * x[k];
  }
  *y = z + 0.5 * uniform(&s) > 0 ? 1.0 : 0.0;
}

/* ---- the model -------------------------------------------------------------
 * p = sigmoid(w . x + b); w and b live in theta[0..F-1] and theta[F]. */

static double score(const double *theta, const double *x, int f) {
  double z = theta[f];
  for (int k = 0; k < f; k++)
    z += theta[k] * x[k];
  return z;
}

/* Cross-entropy of one sample, written so that it never overflows:
 * log(1 + e^z) - y z. */
static double sample_loss(double z, double y) {
  double softplus = z > 0 ? z + log1p(exp(-z)) : log1p(exp(z));
  return softplus - y * z;
}

/* Adds the gradient of samples [lo, hi) of the shard to grad[0..F]. */
static void add_gradient(const double *x, const double *y, long lo, long hi,
                         const double *theta, int f, double *grad) {
  for (long l = lo; l < hi; l++) {
    const double *xl = x + (size_t)l * (size_t)f;
    double err = 1.0 / (1.0 + exp(-score(theta, xl, f))) - y[l];
    for (int k = 0; k < f; k++)
      grad[k] += err * xl[k];
    grad[f] += err;
  }
}

/* ---- hora helpers
 * ------------------------------------------------------------ */

static int check(int rc, const char *what) {
  if (rc < 0) {
    /* the error's words first: another call (hora_rank) would clear them */
    char why[1024];
    snprintf(why, sizeof why, "%s",
             hora_last_error()[0] ? hora_last_error() : hora_strerror(rc));
    if (hora_is_initialized())
      fprintf(stderr, "logreg: rank %d: %s failed: %s: %s\n", hora_rank(),
              what, hora_err_name(rc), why);
    else
      fprintf(stderr, "logreg: %s failed: %s: %s\n", what, hora_err_name(rc),
              why);
  }
  return rc;
}

/* Global loss and accuracy of theta over the whole data set: each rank sums
 * over its shard, one allreduce adds the sums. */
static int evaluate(const double *x, const double *y, long nlocal,
                    const double *theta, const struct cfg *c, double *loss,
                    double *acc) {
  double m[2] = {0, 0}; /* loss sum, correct predictions */
  for (long l = 0; l < nlocal; l++) {
    double z = score(theta, x + (size_t)l * (size_t)c->features, c->features);
    m[0] += sample_loss(z, y[l]);
    m[1] += (z > 0) == (y[l] > 0.5);
  }
  if (check(hora_allreduce("logreg.metrics", m, m, 2, HORA_FLOAT64, HORA_SUM),
            "hora_allreduce(logreg.metrics)") < 0)
    return -1;
  *loss = m[0] / (double)c->samples;
  *acc = m[1] / (double)c->samples;
  return 0;
}

/* The first local index whose global sample index is >= j. */
static long first_local(long j, int rank, int size, long nlocal) {
  long l = j <= rank ? 0 : (j - rank + size - 1) / size;
  return l < nlocal ? l : nlocal;
}

/* One epoch: a step per global batch. grad lies in the arena (hora_alloc),
 * so the allreduce works on it where it lies. */
static int train_epoch(const double *x, const double *y, long nlocal,
                       double *theta, double *grad, const struct cfg *c,
                       int rank, int size) {
  int f = c->features;
  for (long start = 0; start < c->samples; start += c->batch) {
    long end = start + c->batch < c->samples ? start + c->batch : c->samples;
    memset(grad, 0, sizeof(double) * (size_t)(f + 1));
    add_gradient(x, y, first_local(start, rank, size, nlocal),
                 first_local(end, rank, size, nlocal), theta, f, grad);
    if (check(hora_allreduce("logreg.grad", grad, grad, (size_t)f + 1,
                             HORA_FLOAT64, HORA_SUM),
              "hora_allreduce(logreg.grad)") < 0)
      return -1;
    double scale = c->lr / (double)(end - start);
    for (int k = 0; k <= f; k++)
      theta[k] -= scale * grad[k];
  }
  return 0;
}

/* Every rank compares its weights with rank 0's, bit for bit; returns the
 * number of ranks that differ (the same on every rank), or -1. */
static int compare_weights(const double *theta, int f, int rank) {
  size_t bytes = sizeof(double) * (size_t)(f + 1);
  double *ref = malloc(bytes);
  if (!ref) return -1;
  memcpy(ref, theta, bytes);
  int rc =
      check(hora_broadcast("logreg.final", ref, (size_t)f + 1, HORA_FLOAT64, 0),
            "hora_broadcast(logreg.final)");
  int32_t bad = 0;
  for (int k = 0; rc >= 0 && k <= f; k++)
    if (memcmp(&ref[k], &theta[k], sizeof(double)) != 0) {
      fprintf(stderr,
              "logreg: rank %d: weight %d is %.17g (%a), rank 0 has %.17g "
              "(%a)\n",
              rank, k, theta[k], theta[k], ref[k], ref[k]);
      bad = 1;
      break;
    }
  free(ref);
  if (rc < 0) return -1;
  if (check(hora_allreduce("logreg.bad", &bad, &bad, 1, HORA_INT32, HORA_SUM),
            "hora_allreduce(logreg.bad)") < 0)
    return -1;
  return bad;
}

/* ---- options
 * ----------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f, "usage: logreg [--epochs N] [--samples N] [--features N] "
             "[--batch N] [--lr X] [--seed N]\n"
             "  --epochs    passes over the data (default 20)\n"
             "  --samples   size of the whole data set (default 8192)\n"
             "  --features  features per sample (default 32)\n"
             "  --batch     global samples per step, 0 = all (default 256)\n"
             "  --lr        learning rate (default 0.5)\n"
             "  --seed      seed of the data set and of the initial weights "
             "(default 42)\n");
}

static int parse_args(int argc, char **argv, struct cfg *c) {
  static const struct option longopts[] = {
      {"epochs", required_argument, NULL, 'e'},
      {"samples", required_argument, NULL, 's'},
      {"features", required_argument, NULL, 'f'},
      {"batch", required_argument, NULL, 'b'},
      {"lr", required_argument, NULL, 'l'},
      {"seed", required_argument, NULL, 'S'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *c = (struct cfg){.epochs = 20,
                    .samples = 8192,
                    .features = 32,
                    .batch = 256,
                    .lr = 0.5,
                    .seed = 42};
  int o;
  while ((o = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    char *end = NULL;
    switch (o) {
    case 'e':
      c->epochs = (int)strtol(optarg, &end, 10);
      break;
    case 's':
      c->samples = strtol(optarg, &end, 10);
      break;
    case 'f':
      c->features = (int)strtol(optarg, &end, 10);
      break;
    case 'b':
      c->batch = strtol(optarg, &end, 10);
      break;
    case 'l':
      c->lr = strtod(optarg, &end);
      break;
    case 'S':
      c->seed = strtoull(optarg, &end, 10);
      break;
    case 'h':
      usage(stdout);
      exit(0);
    default:
      usage(stderr);
      return -1;
    }
    if (end == optarg || *end != '\0') {
      fprintf(stderr, "logreg: bad number: %s\n", optarg);
      return -1;
    }
  }
  if (optind < argc || c->epochs < 0 || c->samples < 1 || c->features < 1 ||
      c->features > 1 << 20 || c->batch < 0 || !(c->lr > 0)) {
    usage(stderr);
    return -1;
  }
  if (c->batch == 0 || c->batch > c->samples) c->batch = c->samples;
  return 0;
}

/* ---- main
 * -------------------------------------------------------------------- */

struct shard {
  long n;        /* samples this rank owns */
  double *x, *y; /* n x F features, n labels */
  double *theta; /* F + 1 weights */
  double *grad;  /* F + 1, in the hora arena */
};

static int setup(const struct cfg *c, int rank, int size, struct shard *sh) {
  int f = c->features;
  sh->n = c->samples > rank ? (c->samples - rank + size - 1) / size : 0;
  sh->x = malloc(sizeof(double) * (size_t)(sh->n ? sh->n : 1) * (size_t)f);
  sh->y = malloc(sizeof(double) * (size_t)(sh->n ? sh->n : 1));
  sh->theta = malloc(sizeof(double) * (size_t)(f + 1));
  sh->grad = hora_alloc(sizeof(double) * (size_t)(f + 1));
  double *truth = malloc(sizeof(double) * (size_t)(f + 1));
  if (!sh->x || !sh->y || !sh->theta || !sh->grad || !truth) {
    fprintf(stderr, "logreg: rank %d: out of memory%s\n", rank,
            sh->grad ? "" : " (hora_alloc of the gradient failed)");
    free(truth);
    return -1;
  }
  uint64_t s = stream(c->seed, -1);
  for (int k = 0; k <= f; k++)
    truth[k] = 2.0 * uniform(&s);
  for (long l = 0; l < sh->n; l++)
    make_sample(c, truth, rank + l * size, sh->x + (size_t)l * (size_t)f,
                &sh->y[l]);
  free(truth);

  /* Rank 0 draws small random weights; the others start from garbage that
   * only the broadcast can replace. */
  s = stream(c->seed ^ 0x5eedull, -2);
  for (int k = 0; k <= f; k++)
    sh->theta[k] = rank == 0 ? 0.1 * uniform(&s) : 1e3 * (rank + k) + 0.5;
  return check(
      hora_broadcast("logreg.init", sh->theta, (size_t)f + 1, HORA_FLOAT64, 0),
      "hora_broadcast(logreg.init)");
}

static void teardown(struct shard *sh) {
  free(sh->x);
  free(sh->y);
  free(sh->theta);
  hora_free(sh->grad);
}

int main(int argc, char **argv) {
  struct cfg c;
  if (parse_args(argc, argv, &c) < 0) return 2;
  if (check(hora_init(), "hora_init") < 0) return 1;
  int rank = hora_rank(), size = hora_size(), status = 1;
  struct shard sh = {0};
  if (rank == 0)
    printf("logreg: %d ranks, %ld samples (%ld to %ld per rank), %d features, "
           "batch %ld, lr %g, %d epochs\n",
           size, c.samples, c.samples / size, (c.samples + size - 1) / size,
           c.features, c.batch, c.lr, c.epochs);
  if (setup(&c, rank, size, &sh) < 0) goto out;

  double loss, acc;
  for (int e = 1; e <= c.epochs; e++) {
    if (train_epoch(sh.x, sh.y, sh.n, sh.theta, sh.grad, &c, rank, size) < 0 ||
        evaluate(sh.x, sh.y, sh.n, sh.theta, &c, &loss, &acc) < 0)
      goto out;
    if (rank == 0) {
      printf("epoch %d loss %.6f accuracy %.4f\n", e, loss, acc);
      fflush(stdout);
    }
  }
  if (c.epochs == 0 &&
      evaluate(sh.x, sh.y, sh.n, sh.theta, &c, &loss, &acc) < 0)
    goto out;

  int bad = compare_weights(sh.theta, c.features, rank);
  if (bad < 0) goto out;
  if (rank == 0) {
    printf("final loss %.9f accuracy %.4f\n", loss, acc);
    if (bad == 0)
      printf("weights identical on all %d ranks\n", size);
    else
      printf("weights differ from rank 0's on %d of %d ranks\n", bad, size);
  }
  status = bad == 0 ? 0 : 1;

out:
  teardown(&sh);
  if (check(hora_shutdown(), "hora_shutdown") < 0) status = 1;
  return status;
}
