/* test_config.c -- horarun's --config-file (launcher/config.c) and the
 * command-line options around it (launcher/cli.c): every key and its effect
 * on struct hr_opts, the example configs/cluster.yaml, precedence between
 * the file and the flags before and after it, the new flags (--hostfile,
 * -p, -i, --network-interface(s), Horovod's knobs), the choice of hosts, and
 * every error with its file, line and key. */
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "config.h"
#include "hosts.h"
#include "testlib.h"
#include "textfile.h"

#define CHECK_PREFIX(s, prefix)                                                \
  do {                                                                         \
    const char *tl_s = (s), *tl_p = (prefix);                                  \
    tl_checks++;                                                               \
    if (strncmp(tl_s, tl_p, strlen(tl_p)))                                     \
      TL_FAIL("%s starts with %s: \"%s\" vs \"%s\"", #s, #prefix, tl_s, tl_p); \
  } while (0)

static char dir[] = "/tmp/hora-test-config.XXXXXX";
static char cfg[300]; /* dir/c.yaml */

static const char *write_file(const char *name, const char *text) {
  static char path[300];
  hc_fmt(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0)
    TL_FAIL("cannot write %s", path);
  return path;
}

/* Writes text to dir/c.yaml and loads it into a fresh *o. */
static int load(const char *text, struct hr_opts *o, char *err, size_t len) {
  write_file("c.yaml", text);
  if (hr_opts_init(o) < 0) return -2;
  err[0] = '\0';
  return hr_config_load(cfg, o, err, len);
}

static const char *knob(const struct hr_opts *o, const char *name) {
  const struct hc_param *p = hc_param_find(name);
  if (!p) TL_FAIL("no knob %s", name);
  return p ? o->knob[p - hc_params] : NULL;
}

static const char *env(const struct hr_opts *o, const char *name) {
  size_t len = strlen(name);
  for (size_t i = 0; i < o->nenv; i++)
    if (!strncmp(o->env[i], name, len) && o->env[i][len] == '=')
      return o->env[i] + len + 1;
  return NULL;
}

/* Loads text and checks that it fails with "<dir>/c.yaml<rest>" exactly
 * (prefix_only: the message starts with it). */
static void config_error(int prefix_only, const char *text, const char *fmt,
                         ...) __attribute__((format(printf, 3, 4)));
static void config_error(int prefix_only, const char *text, const char *fmt,
                         ...) {
  char rest[768], want[1100], err[1100];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rest, sizeof rest, fmt, ap);
  va_end(ap);
  hc_fmt(want, sizeof want, "%s%s", cfg, rest);
  struct hr_opts o;
  CHECK_EQ_INT(load(text, &o, err, sizeof err), -1);
  if (prefix_only)
    CHECK_PREFIX(err, want);
  else
    CHECK_EQ_STR(err, want);
  hr_opts_free(&o);
}

/* Runs hr_cli_parse on a NULL-terminated word list ("horarun" first). */
static int parse(struct hr_opts *o, char **argv) {
  int argc = 0;
  while (argv[argc])
    argc++;
  return hr_cli_parse(argc, argv, o);
}

/* ---- every key
 * ---------------------------------------------------------------- */

static const char every_key[] =
    "# every key\n"
    "controller: MPI\n"
    "params:\n"
    "  fusion_threshold_mb: 64\n"
    "  cycle_time_ms: 2.5\n"
    "  cache_capacity: 0\n"
    "  hierarchical_allreduce: true\n"
    "  hierarchical_allgather: yes\n"
    "  torus_allreduce: off\n"
    "autotune: {enabled: True, log_file: /tmp/tune.csv, warmup_samples: 4,\n"
    "           steps_per_sample: 11, bayes_opt_max_samples: 21,\n"
    "           gaussian_process_noise: 1}\n"
    "timeline:\n"
    "  filename: /tmp/tl.json\n"
    "  mark_cycles: ON\n"
    "stall_check:\n"
    "  enabled: true\n"
    "  warning_time_seconds: 30\n"
    "  shutdown_time_seconds: 90\n"
    "library_options:\n"
    "  mpi_threads_disable: true\n"
    "  num_nccl_streams: 2\n"
    "  thread_affinity: 3\n"
    "  gloo_timeout_seconds: 45\n"
    "logging:\n"
    "  level: DEBUG\n"
    "  with_timestamp: false\n"
    "hosts:\n"
    "  - node1:4\n"
    "  - node3\n"
    "  - name: node2\n"
    "    slots: 2\n"
    "    user: bob\n"
    "    ssh_port: 2222\n"
    "    address: 10.0.0.2\n"
    "    network_interface: eth1\n"
    "  - {name: \"[2001:db8::7]\", slots: 3}\n"
    "  - \"[2001:db8::8]:2\"\n"
    "ssh:\n"
    "  port: 2200\n"
    "  identity_file: ~/.ssh/id_test\n"
    "  user: alice\n"
    "  options: [\"-o\", \"ConnectTimeout=5\", -F, /etc/ssh/cfg]\n"
    "horad_path: /opt/hora/bin/horad\n"
    "env:\n"
    "  OMP_NUM_THREADS: 4\n"
    "  GREETING: hello world\n"
    "  EMPTY: \"\"\n"
    "  FLAG: true\n"
    "network_interfaces: [eth0, ib0]\n"
    "np: 6\n"
    "start_timeout: 120\n"
    "verbose: yes\n"
    "output_filename: /tmp/out dir\n"
    "prefix_output_with_timestamp: true\n"
    "knobs:\n"
    "  arena_size: 64M\n"
    "  threads: 3\n"
    "  kill_grace: 1.5\n"
    "  heartbeat_timeout: 2\n";

static void test_every_key(void) {
  struct hr_opts o;
  char err[1024];
  CHECK_EQ_INT(load(every_key, &o, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  /* horovodrun's keys -> knobs */
  CHECK_EQ_STR(knob(&o, "fusion_threshold"), "67108864");
  CHECK_EQ_STR(knob(&o, "cycle_time"), "2.5");
  CHECK_EQ_STR(knob(&o, "cache_capacity"), "0");
  CHECK_EQ_STR(knob(&o, "hierarchical_allreduce"), "1");
  CHECK_EQ_STR(knob(&o, "hierarchical_allgather"), "1");
  CHECK_EQ_STR(knob(&o, "torus_allreduce"), "0");
  CHECK_EQ_STR(knob(&o, "autotune"), "1");
  CHECK_EQ_STR(knob(&o, "autotune_log_file"), "/tmp/tune.csv");
  CHECK_EQ_STR(knob(&o, "autotune_warmup_samples"), "4");
  CHECK_EQ_STR(knob(&o, "autotune_steps_per_sample"), "11");
  CHECK_EQ_STR(knob(&o, "autotune_bayes_opt_max_samples"), "21");
  CHECK_EQ_STR(knob(&o, "autotune_gaussian_process_noise"), "1");
  CHECK_EQ_STR(knob(&o, "timeline_filename"), "/tmp/tl.json");
  CHECK_EQ_STR(knob(&o, "timeline_mark_cycles"), "1");
  CHECK_EQ_STR(knob(&o, "stall_check_disable"), "0");
  CHECK_EQ_STR(knob(&o, "stall_check_time"), "30");
  CHECK_EQ_STR(knob(&o, "stall_shutdown_time"), "90");
  CHECK_EQ_STR(knob(&o, "mpi_threads_disable"), "1");
  CHECK_EQ_STR(knob(&o, "num_nccl_streams"), "2");
  CHECK_EQ_STR(knob(&o, "thread_affinity"), "3");
  CHECK_EQ_STR(knob(&o, "gloo_timeout_seconds"), "45");
  CHECK_EQ_STR(knob(&o, "log_level"), "DEBUG");
  CHECK_EQ_STR(knob(&o, "log_hide_timestamp"), "1");
  CHECK_EQ_STR(knob(&o, "start_timeout"), "120");
  CHECK_EQ_STR(knob(&o, "arena_size"), "64M");
  CHECK_EQ_STR(knob(&o, "threads"), "3");
  CHECK_EQ_STR(knob(&o, "kill_grace"), "1.5");
  CHECK_EQ_STR(knob(&o, "heartbeat_timeout"), "2");
  CHECK(knob(&o, "spin_us") == NULL);
  CHECK(hr_opts_knob_num(&o, "fusion_threshold") == 67108864.0);
  CHECK(hr_opts_knob_num(&o, "arena_size") == 64.0 * 1024 * 1024);
  /* hosts, with per-host settings, in order */
  CHECK_EQ_INT(o.host_source, HR_HOSTS_CONFIG);
  CHECK_EQ_INT(o.ncfg_hosts, 5);
  if (o.ncfg_hosts == 5) {
    const struct hr_host *h = o.cfg_hosts;
    CHECK_EQ_STR(h[0].name, "node1");
    CHECK_EQ_INT(h[0].slots, 4);
    CHECK(!h[0].user && !h[0].address && !h[0].iface && !h[0].ssh_port);
    CHECK_EQ_STR(h[1].name, "node3");
    CHECK_EQ_INT(h[1].slots, 1);
    CHECK_EQ_STR(h[2].name, "node2");
    CHECK_EQ_INT(h[2].slots, 2);
    CHECK_EQ_STR(h[2].user, "bob");
    CHECK_EQ_INT(h[2].ssh_port, 2222);
    CHECK_EQ_STR(h[2].address, "10.0.0.2");
    CHECK_EQ_STR(h[2].iface, "eth1");
    CHECK_EQ_INT(h[2].local, 0);
    CHECK_EQ_STR(h[3].name, "2001:db8::7");
    CHECK_EQ_INT(h[3].slots, 3);
    CHECK_EQ_STR(h[4].name, "2001:db8::8");
    CHECK_EQ_INT(h[4].slots, 2);
  }
  /* ssh */
  CHECK_EQ_INT(o.ssh_port, 2200);
  CHECK_EQ_STR(o.ssh_identity, "~/.ssh/id_test");
  CHECK_EQ_STR(o.ssh_user, "alice");
  CHECK_EQ_INT(o.nssh_opts, 4);
  if (o.nssh_opts == 4) {
    CHECK_EQ_STR(o.ssh_opts[0], "-o");
    CHECK_EQ_STR(o.ssh_opts[1], "ConnectTimeout=5");
    CHECK_EQ_STR(o.ssh_opts[2], "-F");
    CHECK_EQ_STR(o.ssh_opts[3], "/etc/ssh/cfg");
  }
  CHECK_EQ_STR(o.horad_path, "/opt/hora/bin/horad");
  /* env, in order */
  CHECK_EQ_INT(o.nenv, 4);
  if (o.nenv == 4) {
    CHECK_EQ_STR(o.env[0], "OMP_NUM_THREADS=4");
    CHECK_EQ_STR(o.env[1], "GREETING=hello world");
    CHECK_EQ_STR(o.env[2], "EMPTY=");
    CHECK_EQ_STR(o.env[3], "FLAG=true");
    CHECK(o.env[4] == NULL);
  }
  CHECK_EQ_INT(o.nifaces, 2);
  if (o.nifaces == 2) {
    CHECK_EQ_STR(o.ifaces[0], "eth0");
    CHECK_EQ_STR(o.ifaces[1], "ib0");
  }
  CHECK_EQ_INT(o.np, 6);
  CHECK_EQ_INT(o.verbose, 1);
  CHECK_EQ_STR(o.output_dir, "/tmp/out dir");
  CHECK_EQ_INT(o.prefix_timestamp, 1);

  /* The hosts of the job: the config's, with ssh.user for those without a
   * user of their own. */
  struct hr_host *h;
  size_t n;
  CHECK_EQ_INT(hr_opts_hosts(&o, &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(n, 5);
  if (n == 5) {
    CHECK_EQ_STR(h[0].user, "alice");
    CHECK_EQ_STR(h[2].user, "bob");
    CHECK_EQ_STR(h[2].address, "10.0.0.2");
    CHECK(h[2].name != o.cfg_hosts[2].name); /* a copy */
  }
  hr_hosts_free(h, n);
  hr_opts_free(&o);
}

/* The example file must load, with the values it shows. */
static void test_example_file(void) {
  const char *top = getenv("HORA_TOP");
  char path[512], err[1024] = "";
  hc_fmt(path, sizeof path, "%s/configs/cluster.yaml", top ? top : ".");
  struct hr_opts o;
  CHECK_EQ_INT(hr_opts_init(&o), 0);
  CHECK_EQ_INT(hr_config_load(path, &o, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(o.np, 8);
  CHECK_EQ_INT(o.ncfg_hosts, 2);
  CHECK_EQ_STR(knob(&o, "fusion_threshold"), "67108864");
  CHECK_EQ_STR(knob(&o, "log_hide_timestamp"), "0");
  CHECK_EQ_STR(knob(&o, "start_timeout"), "60");
  CHECK_EQ_STR(env(&o, "OMP_NUM_THREADS"), "4");
  CHECK_EQ_INT(o.nssh_opts, 2);
  CHECK_EQ_STR(o.horad_path, "/usr/local/bin/horad");
  hr_opts_free(&o);
}

static void test_empty_and_null(void) {
  struct hr_opts o;
  char err[1024];
  CHECK_EQ_INT(load("", &o, err, sizeof err), 0);
  CHECK_EQ_INT(o.host_source, HR_HOSTS_NONE);
  hr_opts_free(&o);
  CHECK_EQ_INT(load("# nothing but comments\n\n", &o, err, sizeof err), 0);
  hr_opts_free(&o);
  /* Sections whose keys are all commented out are empty, not errors. */
  CHECK_EQ_INT(load("params:\n  # fusion_threshold_mb: 1\nautotune: ~\n"
                    "env:\nknobs: null\nssh:\n",
                    &o, err, sizeof err),
               0);
  CHECK_EQ_STR(err, "");
  CHECK(knob(&o, "fusion_threshold") == NULL);
  hr_opts_free(&o);
}

static void test_bools_and_inversions(void) {
  struct hr_opts o;
  char err[1024];
  CHECK_EQ_INT(load("params: {hierarchical_allreduce: No, torus_allreduce: "
                    "YES}\nstall_check: {enabled: false}\n"
                    "logging: {hide_timestamp: on}\nverbose: FALSE\n",
                    &o, err, sizeof err),
               0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_STR(knob(&o, "hierarchical_allreduce"), "0");
  CHECK_EQ_STR(knob(&o, "torus_allreduce"), "1");
  CHECK_EQ_STR(knob(&o, "stall_check_disable"), "1");
  CHECK_EQ_STR(knob(&o, "log_hide_timestamp"), "1");
  CHECK_EQ_INT(o.verbose, 0);
  hr_opts_free(&o);
  CHECK_EQ_INT(load("logging: {with_timestamp: true}\n", &o, err, sizeof err),
               0);
  CHECK_EQ_STR(knob(&o, "log_hide_timestamp"), "0");
  hr_opts_free(&o);
}

static void test_hosts_forms(void) {
  struct hr_opts o;
  char err[1024];
  /* A string, as for -H. */
  CHECK_EQ_INT(load("hosts: a:2,b\n", &o, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(o.ncfg_hosts, 2);
  if (o.ncfg_hosts == 2) {
    CHECK_EQ_STR(o.cfg_hosts[1].name, "b");
    CHECK_EQ_INT(o.cfg_hosts[0].slots, 2);
  }
  hr_opts_free(&o);
  /* Entries for the same host merge; settings fill in. */
  CHECK_EQ_INT(load("hosts:\n  - a:2\n  - {name: A, user: u, slots: 3}\n"
                    "  - {name: localhost}\n  - 127.0.0.1:2\n",
                    &o, err, sizeof err),
               0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(o.ncfg_hosts, 2);
  if (o.ncfg_hosts == 2) {
    CHECK_EQ_STR(o.cfg_hosts[0].name, "a");
    CHECK_EQ_INT(o.cfg_hosts[0].slots, 5);
    CHECK_EQ_STR(o.cfg_hosts[0].user, "u");
    CHECK_EQ_INT(o.cfg_hosts[1].slots, 3);
    CHECK_EQ_INT(o.cfg_hosts[1].local, 1);
  }
  hr_opts_free(&o);
  /* Scoped IPv6 addresses keep their zone, in every form. */
  CHECK_EQ_INT(load("hosts:\n  - \"[fe80::1%eth0]:2\"\n  - fe80::2%eth0\n"
                    "  - {name: \"[fe80::3%eth1]\", slots: 4}\n"
                    "  - {name: n4, address: \"fe80::4%2\"}\n",
                    &o, err, sizeof err),
               0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(o.ncfg_hosts, 4);
  if (o.ncfg_hosts == 4) {
    CHECK_EQ_STR(o.cfg_hosts[0].name, "fe80::1%eth0");
    CHECK_EQ_INT(o.cfg_hosts[0].slots, 2);
    CHECK_EQ_STR(o.cfg_hosts[1].name, "fe80::2%eth0");
    CHECK_EQ_STR(o.cfg_hosts[2].name, "fe80::3%eth1");
    CHECK_EQ_INT(o.cfg_hosts[2].slots, 4);
    CHECK_EQ_STR(o.cfg_hosts[3].address, "fe80::4%2");
  }
  hr_opts_free(&o);
  CHECK_EQ_INT(load("hosts: \"[fe80::1%eth0]:2,b\"\n", &o, err, sizeof err), 0);
  CHECK_EQ_INT(o.ncfg_hosts, 2);
  if (o.ncfg_hosts == 2) CHECK_EQ_STR(o.cfg_hosts[0].name, "fe80::1%eth0");
  hr_opts_free(&o);
}

/* A second file replaces the first one's values; env adds up by name. */
static void test_two_files(void) {
  struct hr_opts o;
  char err[1024] = "";
  char first[300], second[300];
  hc_fmt(first, sizeof first, "%s",
         write_file("first.yaml", "np: 2\nenv: {A: 1, B: 2}\nhosts: [x, y]\n"
                                  "network_interfaces: eth0,eth1\n"
                                  "ssh: {options: [-v]}\n"));
  hc_fmt(second, sizeof second, "%s",
         write_file("second.yaml", "np: 3\nenv: {B: 3, C: 4}\n"
                                   "network_interfaces: [ib0]\n"
                                   "ssh: {options: []}\n"));
  CHECK_EQ_INT(hr_opts_init(&o), 0);
  CHECK_EQ_INT(hr_config_load(first, &o, err, sizeof err), 0);
  CHECK_EQ_INT(o.nifaces, 2);
  CHECK_EQ_INT(o.nssh_opts, 1);
  CHECK_EQ_INT(hr_config_load(second, &o, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(o.np, 3);
  CHECK_EQ_INT(o.nenv, 3);
  CHECK_EQ_STR(env(&o, "A"), "1");
  CHECK_EQ_STR(env(&o, "B"), "3");
  CHECK_EQ_STR(env(&o, "C"), "4");
  CHECK_EQ_INT(o.ncfg_hosts, 2); /* kept: the second file has none */
  CHECK_EQ_INT(o.host_source, HR_HOSTS_CONFIG);
  CHECK_EQ_INT(o.nifaces, 1);
  if (o.nifaces == 1) CHECK_EQ_STR(o.ifaces[0], "ib0");
  CHECK_EQ_INT(o.nssh_opts, 0);
  hr_opts_free(&o);
}

/* ---- precedence: flags before --config-file lose, flags after it win
 * ---------- */

static void test_precedence(void) {
  struct hr_opts o;
  write_file("c.yaml", "params: {cycle_time_ms: 2.5, fusion_threshold_mb: 8}\n"
                       "np: 4\nverbose: false\nhosts: [cfghost:4]\n"
                       "output_filename: cfgdir\nstart_timeout: 7\n"
                       "network_interfaces: [eth0]\nssh: {port: 2200}\n");
  char *before[] = {"horarun",
                    "--cycle-time-ms",
                    "5",
                    "-np",
                    "2",
                    "--verbose",
                    "-H",
                    "flaghost:2",
                    "--output-filename",
                    "flagdir",
                    "--start-timeout=9",
                    "--network-interface",
                    "ib0",
                    "-p",
                    "22",
                    "--fusion-threshold-mb",
                    "1",
                    "--config-file",
                    cfg,
                    "prog",
                    NULL};
  CHECK_EQ_INT(parse(&o, before), HR_CLI_RUN);
  CHECK_EQ_STR(knob(&o, "cycle_time"), "2.5");
  CHECK_EQ_STR(knob(&o, "fusion_threshold"), "8388608");
  CHECK_EQ_STR(knob(&o, "start_timeout"), "7");
  CHECK_EQ_INT(o.np, 4);
  CHECK_EQ_INT(o.verbose, 0);
  CHECK_EQ_INT(o.host_source, HR_HOSTS_CONFIG);
  CHECK_EQ_STR(o.output_dir, "cfgdir");
  CHECK_EQ_INT(o.nifaces, 1);
  if (o.nifaces) CHECK_EQ_STR(o.ifaces[0], "eth0");
  CHECK_EQ_INT(o.ssh_port, 2200);
  CHECK_EQ_INT(o.nprog, 1);
  CHECK_EQ_STR(o.prog[0], "prog");
  hr_opts_free(&o);

  char *after[] = {"horarun",
                   "--config-file",
                   cfg,
                   "--cycle-time-ms",
                   "5",
                   "-np",
                   "2",
                   "--verbose",
                   "-H",
                   "flaghost:2",
                   "--output-filename",
                   "flagdir",
                   "--start-timeout=9",
                   "--network-interface",
                   "ib0",
                   "--network-interface=ib1",
                   "--ssh-port=22",
                   "--fusion-threshold-mb",
                   "1",
                   "prog",
                   "--cycle-time-ms",
                   "6",
                   NULL};
  CHECK_EQ_INT(parse(&o, after), HR_CLI_RUN);
  CHECK_EQ_STR(knob(&o, "cycle_time"), "5");
  CHECK_EQ_STR(knob(&o, "fusion_threshold"), "1048576");
  CHECK_EQ_STR(knob(&o, "start_timeout"), "9");
  CHECK_EQ_INT(o.np, 2);
  CHECK_EQ_INT(o.verbose, 1);
  CHECK_EQ_INT(o.host_source, HR_HOSTS_LIST);
  CHECK_EQ_STR(o.hosts, "flaghost:2");
  CHECK_EQ_STR(o.output_dir, "flagdir");
  /* The first --network-interface after the file replaces its list. */
  CHECK_EQ_INT(o.nifaces, 2);
  if (o.nifaces == 2) {
    CHECK_EQ_STR(o.ifaces[0], "ib0");
    CHECK_EQ_STR(o.ifaces[1], "ib1");
  }
  CHECK_EQ_INT(o.ssh_port, 22);
  CHECK_EQ_INT(o.nprog, 3); /* options after the program are its own */
  hr_opts_free(&o);

  /* -H, then --hostfile, then the config: the last one wins. */
  char *h1[] = {
      "horarun", "--config-file", cfg, "-hostfile", "hf", "-H", "a", "x", NULL};
  CHECK_EQ_INT(parse(&o, h1), HR_CLI_RUN);
  CHECK_EQ_INT(o.host_source, HR_HOSTS_LIST);
  hr_opts_free(&o);
  char *h2[] = {"horarun", "-H", "a", "--hostfile=hf", "x", NULL};
  CHECK_EQ_INT(parse(&o, h2), HR_CLI_RUN);
  CHECK_EQ_INT(o.host_source, HR_HOSTS_FILE);
  CHECK_EQ_STR(o.hostfile, "hf");
  hr_opts_free(&o);
}

/* ---- the other new flags
 * ---------------------------------------------------------- */

static void test_flags(void) {
  struct hr_opts o;
  char *a[] = {"horarun",
               "-p",
               "2222",
               "-i",
               "/k/id",
               "--network-interface",
               "eth0,eth1",
               "--network-interface",
               "eth0",
               "--network-interfaces=ib0,ib1",
               "--network-interface",
               "ib2",
               "--hierarchical-allreduce",
               "--no-torus-allreduce",
               "--autotune",
               "--no-autotune",
               "--autotune-gaussian-process-noise",
               "0.5",
               "--timeline-filename",
               "/t.json",
               "--log-hide-timestamp",
               "--cache-capacity=0",
               "x",
               NULL};
  CHECK_EQ_INT(parse(&o, a), HR_CLI_RUN);
  CHECK_EQ_INT(o.ssh_port, 2222);
  CHECK_EQ_STR(o.ssh_identity, "/k/id");
  CHECK_EQ_INT(o.nifaces, 3);
  if (o.nifaces == 3) {
    CHECK_EQ_STR(o.ifaces[0], "ib0");
    CHECK_EQ_STR(o.ifaces[1], "ib1");
    CHECK_EQ_STR(o.ifaces[2], "ib2");
  }
  CHECK_EQ_STR(knob(&o, "hierarchical_allreduce"), "1");
  CHECK_EQ_STR(knob(&o, "torus_allreduce"), "0");
  CHECK_EQ_STR(knob(&o, "autotune"), "0");
  CHECK_EQ_STR(knob(&o, "autotune_gaussian_process_noise"), "0.5");
  CHECK_EQ_STR(knob(&o, "timeline_filename"), "/t.json");
  CHECK_EQ_STR(knob(&o, "log_hide_timestamp"), "1");
  CHECK_EQ_STR(knob(&o, "cache_capacity"), "0");
  hr_opts_free(&o);

  /* --no-stall-check turns the stall times horad reads to 0. */
  char *b[] = {"horarun", "--stall-check-warning-time-seconds",
               "5",       "--no-stall-check",
               "x",       NULL};
  CHECK_EQ_INT(parse(&o, b), HR_CLI_RUN);
  CHECK_EQ_STR(knob(&o, "stall_check_disable"), "1");
  CHECK_EQ_STR(knob(&o, "stall_check_time"), "0");
  CHECK_EQ_STR(knob(&o, "stall_shutdown_time"), "0");
  hr_opts_free(&o);
  char *c[] = {"horarun",
               "--no-stall-check",
               "--stall-check",
               "--stall-check-warning-time-seconds",
               "5",
               "x",
               NULL};
  CHECK_EQ_INT(parse(&o, c), HR_CLI_RUN);
  CHECK_EQ_STR(knob(&o, "stall_check_time"), "5");
  hr_opts_free(&o);

  /* Usage errors. */
  char *bad[][6] = {
      {"horarun", "-p", "0", "x", NULL},
      {"horarun", "--ssh-port", "65536", "x", NULL},
      {"horarun", "-p", "22x", "x", NULL},
      {"horarun", "-i", "", "x", NULL},
      {"horarun", "--hostfile", "", "x", NULL},
      {"horarun", "--network-interface", "a,,b", "x", NULL},
      {"horarun", "--network-interfaces", "this-name-is-too-long", "x", NULL},
      {"horarun", "--fusion-threshold-mb", "1.5", "x", NULL},
      {"horarun", "--fusion-threshold-mb", "1048577", "x", NULL},
      {"horarun", "--autotune-gaussian-process-noise", "1.5", "x", NULL},
      {"horarun", "--cycle-time-ms", "-1", "x", NULL},
      {"horarun", "--autotune=1", "x", NULL},
      {"horarun", "--no-autotune=1", "x", NULL},
      {"horarun", "--config-file", "/nonexistent/c.yaml", "x", NULL},
  };
  for (size_t i = 0; i < HC_ARRAY_SIZE(bad); i++) {
    int rc = parse(&o, bad[i]);
    if (rc != HR_EXIT_USAGE)
      TL_FAIL("%s %s: rc %d, expected %d", bad[i][1], bad[i][2], rc,
              HR_EXIT_USAGE);
    tl_checks++;
    hr_opts_free(&o);
  }
}

static void test_opts_hosts(void) {
  struct hr_opts o;
  struct hr_host *h;
  size_t n;
  char err[1024] = "", want[600];
  CHECK_EQ_INT(hr_opts_init(&o), 0);
  CHECK_EQ_INT(hr_opts_hosts(&o, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, "-np is required: the number of processes to run");
  o.np = 3;
  CHECK_EQ_INT(hr_opts_hosts(&o, &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(n, 1);
  if (n == 1) {
    CHECK_EQ_STR(h[0].name, "localhost");
    CHECK_EQ_INT(h[0].slots, 3);
    CHECK(h[0].user == NULL);
  }
  hr_hosts_free(h, n);
  o.hosts = "a:2,a:b";
  o.host_source = HR_HOSTS_LIST;
  CHECK_EQ_INT(hr_opts_hosts(&o, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, "-H: bad host 'a:b': slots must be a whole number from 1 "
                    "to 1000000");
  o.hostfile = write_file("hosts", "a slots=2\nb slots=two\n");
  o.host_source = HR_HOSTS_FILE;
  CHECK_EQ_INT(hr_opts_hosts(&o, &h, &n, err, sizeof err), -1);
  hc_fmt(want, sizeof want,
         "%s:2: bad slots value 'two': expected a whole number from 1 to "
         "1000000",
         o.hostfile);
  CHECK_EQ_STR(err, want);
  o.hostfile = write_file("hosts", "a slots=2\nb\n");
  o.ssh_user = "dflt";
  CHECK_EQ_INT(hr_opts_hosts(&o, &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(n, 2);
  if (n == 2) {
    CHECK_EQ_STR(h[1].name, "b");
    CHECK_EQ_STR(h[0].user, "dflt");
    CHECK_EQ_STR(h[1].user, "dflt");
  }
  hr_hosts_free(h, n);
  hr_opts_free(&o);
}

/* ---- errors: file, line, key
 * --------------------------------------------------- */

static void test_errors_keys(void) {
  config_error(0, "stall_check:\n  enabled: true\n  stall_chek: 3\n",
               ":3: unknown key 'stall_chek' in 'stall_check' (expected one "
               "of: enabled, warning_time_seconds, shutdown_time_seconds)");
  config_error(1, "np: 2\nstall_chek: {}\n",
               ":2: unknown key 'stall_chek' (expected one of: controller, "
               "params, autotune,");
  config_error(0, "params:\n  fusion_threshold: 64\n",
               ":2: unknown key 'fusion_threshold' in 'params' (expected one "
               "of: fusion_threshold_mb, cycle_time_ms, cache_capacity, "
               "hierarchical_allreduce, hierarchical_allgather, "
               "torus_allreduce)");
  config_error(0, "hosts:\n  - a\n  - node1: 4\n",
               ":3: unknown key 'node1' in 'hosts[1]' (expected one of: name, "
               "slots, ssh_port, user, address, network_interface); a host "
               "with slots is written 'node1:4' (no blank after the colon) "
               "or {name: node1, slots: 4}");
  config_error(1, "ssh:\n  identity: x\n",
               ":2: unknown key 'identity' in 'ssh' (expected one of: port, "
               "identity_file, user, options)");
  config_error(0, "knobs:\n  threads: 2\n  arena: 1M\n",
               ":3: unknown knob 'arena' in 'knobs' (the knobs are listed by "
               "horarun --help and in hora.yaml(5))");
  config_error(0, "np: 2\nverbose: true\nnp: 3\n",
               ":3: duplicate key 'np' at the top level (first at line 1)");
  config_error(0, "params:\n  cycle_time_ms: 1\n  cycle_time_ms: 2\n",
               ":3: duplicate key 'cycle_time_ms' in 'params' (first at line "
               "2)");
  config_error(0, "env:\n  A: 1\n  B: 2\n  A: 3\n",
               ":4: duplicate key 'A' in 'env' (first at line 2)");
  config_error(0, "hosts:\n  - {name: a, slots: 1, slots: 2}\n",
               ":2: duplicate key 'slots' in 'hosts[0]' (first at line 2)");
  config_error(0, "? [a, b]\n: 1\n",
               ":1: keys must be plain names (at the top level)");
}

static void test_errors_types(void) {
  config_error(0, "params: {cycle_time_ms: [1]}\n",
               ":1: 'params.cycle_time_ms' must be a number, not a list");
  config_error(0, "params: 5\n",
               ":1: 'params' must be a mapping of keys, not a single value");
  config_error(0, "- np: 2\n",
               ":1: the top level must be a mapping of keys, not a list");
  config_error(0, "\n\nverbose: [yes]\n",
               ":3: 'verbose' must be true or false, not a list");
  config_error(0, "np:\n  a: 1\n",
               ":2: 'np' must be a whole number, not a mapping");
  config_error(0, "np:\n", ":1: 'np' has no value (expected a whole number)");
  config_error(0, "horad_path: {a: b}\n",
               ":1: 'horad_path' must be a string, not a mapping");
  config_error(0, "horad_path: \"\"\n", ":1: 'horad_path' is empty");
  config_error(0, "horad_path: \"a\\0b\"\n",
               ":1: 'horad_path' holds a NUL character");
  config_error(0, "hosts:\n",
               ":1: 'hosts' must be a list of hosts, not "
               "empty");
  config_error(0, "hosts: []\n", ":1: 'hosts' is an empty list");
  config_error(0, "hosts: {a: 1}\n",
               ":1: 'hosts' must be a list of hosts, not a mapping");
  config_error(0, "hosts:\n  - [a, b]\n",
               ":2: 'hosts[0]' must be a host (\"node1\", \"node1:4\") or a "
               "mapping with a name, not a list (quote IPv6 addresses: "
               "\"[::1]:2\")");
  config_error(0, "hosts:\n  - a\n  -\n",
               ":3: 'hosts[1]' must be a host (\"node1\", \"node1:4\") or a "
               "mapping with a name, not empty (quote IPv6 addresses: "
               "\"[::1]:2\")");
  config_error(0, "ssh:\n  options: -o X=1\n",
               ":2: 'ssh.options' must be a list of ssh arguments (\"-o\", "
               "\"Name=value\"), not a single value");
  config_error(0, "ssh:\n  options: [-v, \"\"]\n",
               ":2: 'ssh.options[1]' is empty");
  config_error(0, "ssh:\n  options: [[-v]]\n",
               ":2: 'ssh.options[0]' must be a string, not a list");
  config_error(0, "env: [A=1]\n",
               ":1: 'env' must be a mapping of NAME: value, not a list");
  config_error(0, "env:\n  A:\n    - 1\n",
               ":3: 'env.A' must be a single value, not a list");
  config_error(0, "network_interfaces: {a: 1}\n",
               ":1: 'network_interfaces' must be a list of interface names, "
               "not a mapping");
  config_error(0, "knobs: [threads]\n",
               ":1: 'knobs' must be a mapping of knob names to values, not a "
               "list");
}

static void test_errors_values(void) {
  config_error(0, "params:\n  cache_capacity: lots\n",
               ":2: 'params.cache_capacity': bad value 'lots': expected a "
               "non-negative whole number of entries");
  config_error(0, "stall_check: {warning_time_seconds: -5}\n",
               ":1: 'stall_check.warning_time_seconds': bad value '-5': "
               "expected a non-negative whole number of seconds");
  config_error(0, "autotune:\n  gaussian_process_noise: 1.5\n",
               ":2: 'autotune.gaussian_process_noise': bad value '1.5': "
               "expected a number from 0 to 1");
  config_error(0, "params: {fusion_threshold_mb: -1}\n",
               ":1: 'params.fusion_threshold_mb': bad value '-1': expected a "
               "whole number from 0 to 1048576");
  config_error(0, "params: {fusion_threshold_mb: 2.5}\n",
               ":1: 'params.fusion_threshold_mb': bad value '2.5': expected a "
               "whole number from 0 to 1048576");
  config_error(0, "params: {cycle_time_ms: fast}\n",
               ":1: 'params.cycle_time_ms': bad value 'fast': expected a "
               "non-negative number of milliseconds");
  config_error(0, "params: {torus_allreduce: maybe}\n",
               ":1: 'params.torus_allreduce': bad value 'maybe': expected "
               "true or false");
  config_error(0, "stall_check: {enabled: 1}\n",
               ":1: 'stall_check.enabled': bad value '1': expected true or "
               "false");
  config_error(0, "logging:\n  level: loud\n",
               ":2: 'logging.level': bad value 'loud': expected trace, debug, "
               "info, warning, error or fatal");
  config_error(0, "np: 0\n",
               ":1: 'np': bad value '0': expected a whole "
               "number from 1 to 1048576");
  config_error(0, "np: 2x\n",
               ":1: 'np': bad value '2x': expected a whole "
               "number from 1 to 1048576");
  config_error(0, "start_timeout: -1\n",
               ":1: 'start_timeout': bad value '-1': expected a non-negative "
               "whole number of seconds");
  config_error(0, "knobs:\n  arena_size: lots\n",
               ":2: 'knobs.arena_size': bad value 'lots': expected a size in "
               "bytes, like 64M (suffixes K, M, G)");
  config_error(0, "controller: nccl\n",
               ":1: 'controller': bad value 'nccl': expected gloo or mpi");
  config_error(0, "ssh:\n  port: 70000\n",
               ":2: 'ssh.port': bad value '70000': expected a whole number "
               "from 1 to 65535");
  config_error(0, "ssh:\n  user: -oProxyCommand=x\n",
               ":2: 'ssh.user': bad user name '-oProxyCommand=x'");
  config_error(0, "hosts:\n  - {name: a, ssh_port: 0}\n",
               ":2: 'hosts[0].ssh_port': bad value '0': expected a whole "
               "number from 1 to 65535");
  config_error(0, "hosts:\n  - name: a\n    slots: 0\n",
               ":3: 'hosts[0].slots': bad value '0': expected a whole number "
               "from 1 to 1000000");
  config_error(0, "hosts:\n  - slots: 2\n", ":2: 'hosts[0]' has no 'name'");
  config_error(0, "hosts:\n  - name: a b\n",
               ":2: 'hosts[0].name': bad host name 'a b' (letters, digits, "
               "'.', '-' and '_', or an IP address; the slots go in "
               "'slots')");
  config_error(0, "hosts:\n  - {name: a, address: -v}\n",
               ":2: 'hosts[0].address': bad host name '-v' (letters, digits, "
               "'.', '-' and '_', or an IP address; the slots go in "
               "'slots')");
  config_error(0, "hosts:\n  - a\n  - x:0\n",
               ":3: 'hosts[1]': bad host 'x:0': slots must be a whole number "
               "from 1 to 1000000");
  config_error(0, "hosts: a:1,,b\n",
               ":1: 'hosts': empty entry in host list 'a:1,,b'");
  config_error(0, "hosts:\n  - {name: a, user: u}\n  - {name: a, user: v}\n",
               ":3: 'hosts[1]': host 'a' is given twice, with a different "
               "user");
  config_error(0, "hosts:\n  - {name: a, user: \"b c\"}\n",
               ":2: 'hosts[0].user': bad user name 'b c'");
  config_error(0, "hosts:\n  - {name: a, network_interface: eth/0}\n",
               ":2: 'hosts[0].network_interface': bad network interface "
               "'eth/0'");
  config_error(0, "network_interfaces: [eth0, \"a,b\"]\n",
               ":1: 'network_interfaces[1]': bad network interface 'a,b'");
  config_error(0, "network_interfaces: eth0,,eth1\n",
               ":1: 'network_interfaces': empty interface name in "
               "'eth0,,eth1'");
  config_error(0, "env:\n  1X: a\n",
               ":2: 'env': bad variable name '1X' (letters, digits and '_', "
               "not starting with a digit)");
  config_error(0, "env:\n  A-B: a\n",
               ":2: 'env': bad variable name 'A-B' (letters, digits and '_', "
               "not starting with a digit)");
  config_error(0, "env:\n  FOO:\n",
               ":2: 'env.FOO' has no value (write FOO: \"\" for an empty "
               "one)");
}

static void test_errors_syntax(void) {
  config_error(0, "params:\n  a: 1\n b: 2\n",
               ":3: YAML syntax error: did not find expected key (while "
               "parsing a block mapping at line 1)");
  config_error(1, "params:\n\tcycle_time_ms: 1\n", ":2: YAML syntax error: ");
  config_error(1, "np: [1, 2\n", ":2: YAML syntax error: ");
  config_error(1, "hosts:\n  - [::1]:2\n", ":2: YAML syntax error: ");
  config_error(0, "np: 1\n---\nnp: 2\n",
               ":3: a second YAML document ('---'): put every setting in one");
  config_error(1, "np: 1\n---\nnp: [\n", ":4: YAML syntax error: ");
  config_error(1, "env: {A: \"\xff\xfe\"}\n",
               ": cannot read the file: invalid leading UTF-8 octet");
  config_error(1, "a: *nowhere\n", ":1: YAML syntax error: ");

  struct hr_opts o;
  char err[1024], want[1100], path[400];
  CHECK_EQ_INT(hr_opts_init(&o), 0);
  hc_fmt(path, sizeof path, "%s/missing.yaml", dir);
  CHECK_EQ_INT(hr_config_load(path, &o, err, sizeof err), -1);
  hc_fmt(want, sizeof want,
         "cannot read config file '%s': No such file or directory", path);
  CHECK_EQ_STR(err, want);
  CHECK_EQ_INT(hr_config_load(dir, &o, err, sizeof err), -1);
  hc_fmt(want, sizeof want, "cannot read config file '%s': Is a directory",
         dir);
  CHECK_EQ_STR(err, want);
  hr_opts_free(&o);
}

/* A NUL character ("\0" in a double-quoted YAML string) in any key or
 * value is refused with the file, the line and the key: C strings would
 * silently end there. */
static void test_nul(void) {
  config_error(0, "np: \"4\\0x\"\n", ":1: 'np' holds a NUL character");
  config_error(0, "\"verbose\\0junk\": true\n",
               ":1: key 'verbose\\0junk' at the top level holds a NUL "
               "character");
  config_error(0, "np: 1\nenv:\n  \"A\\0B\": x\n",
               ":3: key 'A\\0B' in 'env' holds a NUL character");
  config_error(0, "hosts: \"localhost:2\\0,evil:9\"\n",
               ":1: 'hosts' holds a NUL character");
  config_error(0, "hosts:\n  - a\n  - \"b:2\\0x\"\n",
               ":3: 'hosts[1]' holds a NUL character");
  config_error(0, "hosts:\n  - {name: a, user: \"u\\0v\"}\n",
               ":2: 'hosts[0].user' holds a NUL character");
  config_error(0, "network_interfaces: \"lo\\0x\"\n",
               ":1: 'network_interfaces' holds a NUL character");
  config_error(0, "ssh:\n  options: [-v, \"-o\\0x\"]\n",
               ":2: 'ssh.options[1]' holds a NUL character");
  config_error(0, "knobs: {\"threads\\0\": 2}\n",
               ":1: key 'threads\\0' in 'knobs' holds a NUL character");
}

/* Deep nesting, huge mappings and many aliases are refused before libyaml
 * builds the document (100,000 levels took it 36 s), at once. */
static void test_depth(void) {
  /* 16 levels are fine (then refused as a type error) */
  config_error(0, "env: {A: [[[[[[[[[[[[[[1]]]]]]]]]]]]]]}\n",
               ":1: 'env.A' must be a single value, not a list");
  config_error(0, "env: {A: [[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]}\n",
               ":1: nested deeper than 16 levels in 'env.A[0][0][0][0][0][0]"
               "[0][0][0][0][0][0][0][0]'");
  config_error(0,
               "a:\n b:\n  c:\n   d:\n    e:\n     f:\n      g:\n       h:\n"
               "        i:\n         j:\n          k:\n           l:\n"
               "            m:\n             n:\n              o:\n"
               "               p:\n                q: 1\n",
               ":17: nested deeper than 16 levels in "
               "'a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p'");
  /* 100,000 levels in lines of 1000 */
  size_t n = 100000, len = 3 + 2 * (n + n / 1000 * 2) + 1;
  char *text = malloc(len), *p = text;
  CHECK(text != NULL);
  if (!text) return;
  p += sprintf(p, "a:\n");
  for (size_t i = 0; i < n; i++) {
    if (i % 1000 == 0) p += sprintf(p, "%s ", i ? "\n" : "");
    *p++ = '[';
  }
  for (size_t i = 0; i < n; i++) {
    if (i % 1000 == 0) p += sprintf(p, "\n ");
    *p++ = ']';
  }
  *p++ = '\n';
  *p = '\0';
  CHECK(p < text + len);
  uint64_t t0 = hc_now_ns();
  config_error(1, text, ":2: nested deeper than 16 levels in 'a[0]");
  uint64_t ms = (hc_now_ns() - t0) / 1000000;
  if (ms > 1000) TL_FAIL("100,000 levels took %llu ms", (unsigned long long)ms);
  free(text);

  /* a mapping of more than 4096 keys */
  text = malloc(4100 * 16 + 16);
  CHECK(text != NULL);
  if (!text) return;
  p = text + sprintf(text, "env:\n");
  for (int i = 0; i < 4097; i++)
    p += sprintf(p, "  A%d: x\n", i);
  config_error(0, text, ":4098: more than 4096 keys in 'env'");
  /* 4096 are fine */
  struct hr_opts o;
  char err[1024];
  p = text + sprintf(text, "env:\n");
  for (int i = 0; i < 4096; i++)
    p += sprintf(p, "  A%d: x\n", i);
  CHECK_EQ_INT(load(text, &o, err, sizeof err), 0);
  CHECK_EQ_INT(o.nenv, 4096);
  hr_opts_free(&o);
  free(text);

  /* anchors and aliases */
  text = malloc(1100 * 24 + 64);
  CHECK(text != NULL);
  if (!text) return;
  p = text + sprintf(text, "ssh:\n  options: [&a x");
  for (int i = 1; i < 1100; i++)
    p += sprintf(p, ",\n    *a");
  sprintf(p, "]\n");
  config_error(0, text,
               ":1026: more than 1024 YAML anchors and aliases (&x, *x)");
  CHECK_EQ_INT(load("ssh: {options: [&a -v, *a]}\n", &o, err, sizeof err), 0);
  CHECK_EQ_INT(o.nssh_opts, 2);
  hr_opts_free(&o);
  free(text);
}

/* Huge or binary files fail at once, naming the file (and the line). */
static void test_file_limits(void) {
  struct hr_opts o;
  char err[1024], want[1100];
  CHECK_EQ_INT(hr_opts_init(&o), 0);
  CHECK_EQ_INT(hr_config_load("/dev/zero", &o, err, sizeof err), -1);
  CHECK_EQ_STR(err, "/dev/zero:1: NUL byte in the line (not a text file?)");
  const char *p = write_file("big.yaml", "np: 1\n");
  CHECK_EQ_INT(truncate(p, (off_t)HR_CONFIG_MAX + 1), 0);
  hc_fmt(want, sizeof want,
         "%s: larger than 1 MiB (the most a config file may hold)", p);
  CHECK_EQ_INT(hr_config_load(p, &o, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
  unlink(p);
  hr_opts_free(&o);
  size_t len = HR_FILE_LINE_MAX + 40;
  char *text = malloc(len + 1);
  CHECK(text != NULL);
  if (!text) return;
  memset(text, ' ', len);
  memcpy(text, "np: 2\nverbose: true", 19);
  text[len - 2] = '#'; /* a blank-padded line, then a comment */
  text[len - 1] = '\n';
  text[len] = '\0';
  config_error(0, text,
               ":2: line longer than 65536 bytes (the most a config file "
               "allows)");
  free(text);
}

/* hc_param_check(): each type, with what it says is expected. */
static void param_case(const char *knob, const char *v, const char *why) {
  const struct hc_param *p = hc_param_find(knob);
  char got[256] = "";
  CHECK(p != NULL);
  if (!p) return;
  int rc = hc_param_check(p, v, got, sizeof got);
  if (!why) {
    if (rc != 0) TL_FAIL("%s='%s' refused: %s", knob, v, got);
  } else {
    CHECK_EQ_INT(rc, -1);
    CHECK_EQ_STR(got, why);
  }
}

/* The knob table and the names the code uses (HC_KNOBS) are the same
 * list, in the same order: a knob the code reads is always described. */
static void test_knob_names(void) {
  CHECK_EQ_INT((int)hc_params_check(), 0);
  CHECK_EQ_INT((int)hc_nparams, HC_NKNOBS);
  CHECK(hc_param_int(spin_us) == 200);
}

static void test_param_check(void) {
  const char *secs = "expected a non-negative number of seconds";
  const char *us = "expected a non-negative whole number of microseconds";
  const char *size = "expected a size in bytes, like 64M (suffixes K, M, G)";
  param_case("kill_grace", "2.5", NULL);
  param_case("kill_grace", "0", NULL);
  param_case("kill_grace", "abc", secs);
  param_case("kill_grace", "-1", secs);
  param_case("kill_grace", "nan", secs);
  param_case("kill_grace", "inf", secs);
  param_case("kill_grace", " 1", secs);
  param_case("kill_grace", "1s", secs);
  param_case("kill_grace", "", secs);
  param_case("spin_us", "200", NULL);
  param_case("spin_us", "-3x", us);
  param_case("spin_us", "-3", us);
  param_case("spin_us", "+3", us);
  param_case("spin_us", "3.5", us);
  param_case("spin_us", "2147483648", us);
  param_case("spin_us", "99999999999999999999", us);
  param_case("threads", "x", "expected a non-negative whole number of threads");
  param_case("thread_affinity", "x", "expected a non-negative whole number");
  param_case("arena_size", "64M", NULL);
  param_case("arena_size", "1.5G", NULL);
  param_case("arena_size", "4096", NULL);
  param_case("arena_size", "lots", size);
  param_case("arena_size", "-1M", size);
  param_case("arena_size", "nanM", size);
  param_case("arena_size", "1e30G", size);
  param_case("autotune_gaussian_process_noise", "0.5", NULL);
  param_case("autotune_gaussian_process_noise", "1.5",
             "expected a number from 0 to 1");
  param_case("autotune", "1", NULL);
  param_case("autotune", "yes", "expected 0 or 1");
  param_case("log_level", "debug", NULL);
  param_case("log_level", "loud",
             "expected trace, debug, info, warning, error or fatal");
  param_case("timeline_filename", "/tmp/t.json", NULL);
  param_case("timeline_filename", "", "expected a non-empty value");
  for (size_t i = 0; i < hc_nparams; i++) { /* every default is valid */
    char why[256];
    const struct hc_param *p = &hc_params[i];
    if (*p->def && hc_param_check(p, p->def, why, sizeof why) < 0)
      TL_FAIL("default of %s '%s' refused: %s", p->name, p->def, why);
  }
}

/* hr_env_check(): the knobs' variables in the environment. */
static void test_env_check(void) {
  struct hr_opts o;
  char err[512];
  CHECK_EQ_INT(hr_opts_init(&o), 0);
  char *good[] = {"HORA_SPIN_US=10",        "HORA_KILL_GRACE=",  "PATH=/bin",
                  "HOROVOD_CYCLE_TIME=0.5", "HORA_SPIN_USX=abc", NULL};
  CHECK_EQ_INT(hr_env_check(&o, good, err, sizeof err), 0);
  char *grace[] = {"PATH=/bin", "HORA_KILL_GRACE=abc", NULL};
  CHECK_EQ_INT(hr_env_check(&o, grace, err, sizeof err), -1);
  CHECK_EQ_STR(err, "invalid HORA_KILL_GRACE value 'abc' in the environment: "
                    "expected a non-negative number of seconds");
  char *spin[] = {"HORA_SPIN_US=-3x", NULL};
  CHECK_EQ_INT(hr_env_check(&o, spin, err, sizeof err), -1);
  CHECK_EQ_STR(err, "invalid HORA_SPIN_US value '-3x' in the environment: "
                    "expected a non-negative whole number of microseconds");
  char *alias[] = {"HOROVOD_FUSION_THRESHOLD=big", NULL};
  CHECK_EQ_INT(hr_env_check(&o, alias, err, sizeof err), -1);
  CHECK_PREFIX(err, "invalid HOROVOD_FUSION_THRESHOLD value 'big'");
  /* a knob given as a flag replaces its variables: not checked */
  const struct hc_param *p = hc_param_find("spin_us");
  o.knob[p - hc_params] = "5";
  CHECK_EQ_INT(hr_env_check(&o, spin, err, sizeof err), 0);
  hr_opts_free(&o);
  /* a config's env goes over the environment, and is checked as it loads */
  CHECK_EQ_INT(load("env: {HORA_SPIN_US: \"7\"}\n", &o, err, sizeof err), 0);
  CHECK_EQ_INT(hr_env_check(&o, spin, err, sizeof err), 0);
  hr_opts_free(&o);
  config_error(0, "env:\n  HORA_KILL_GRACE: soon\n",
               ":2: 'env.HORA_KILL_GRACE': bad value 'soon': expected a "
               "non-negative number of seconds");
  config_error(0, "env: {HOROVOD_AUTOTUNE: \"yes\"}\n",
               ":1: 'env.HOROVOD_AUTOTUNE': bad value 'yes': expected 0 or 1");
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  hc_fmt(cfg, sizeof cfg, "%s/c.yaml", dir);
  RUN(test_every_key);
  RUN(test_example_file);
  RUN(test_empty_and_null);
  RUN(test_bools_and_inversions);
  RUN(test_hosts_forms);
  RUN(test_two_files);
  RUN(test_precedence);
  RUN(test_flags);
  RUN(test_opts_hosts);
  RUN(test_errors_keys);
  RUN(test_errors_types);
  RUN(test_errors_values);
  RUN(test_errors_syntax);
  RUN(test_file_limits);
  RUN(test_nul);
  RUN(test_depth);
  RUN(test_knob_names);
  RUN(test_param_check);
  RUN(test_env_check);
  const char *files[] = {"c.yaml", "first.yaml", "second.yaml", "hosts"};
  for (size_t i = 0; i < HC_ARRAY_SIZE(files); i++) {
    char p[400];
    hc_fmt(p, sizeof p, "%s/%s", dir, files[i]);
    unlink(p);
  }
  rmdir(dir);
  TL_EXIT();
}
