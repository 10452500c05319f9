/* config.h -- horarun's --config-file: a YAML file of Horovod's runtime
 * parameters (horovodrun's keys) and hora's cluster settings (hosts, ssh,
 * environment). Every key is described in hora.yaml(5). */
#ifndef HORA_LAUNCHER_CONFIG_H
#define HORA_LAUNCHER_CONFIG_H

#include <stddef.h>

#include "opts.h"

/* The deepest nesting of mappings and lists a config file may have (hora's
 * own keys need 3: hosts, a host, its settings); deeper is an error found
 * before the file is loaded. */
#define HR_CONFIG_DEPTH_MAX 16
/* The most keys one mapping may have (as many as the environment of a job
 * may have variables), and the most YAML anchors and aliases in a file. */
#define HR_CONFIG_KEYS_MAX 4096
#define HR_CONFIG_ANCHORS_MAX 1024

/* Reads the YAML file at `path` and applies every setting in it to *o, over
 * what is there (the command line parser calls it where --config-file
 * stands, so later flags override the file). o must have been set up by
 * hr_opts_init(); strings the file gives are owned by o.
 *
 * The file is checked strictly: an unknown key, a duplicate key, a value of
 * the wrong type or out of range, a NUL character in a key or value,
 * nesting deeper than HR_CONFIG_DEPTH_MAX, a mapping of more than
 * HR_CONFIG_KEYS_MAX keys, more than HR_CONFIG_ANCHORS_MAX anchors and
 * aliases, a file past the limits of
 * textfile.h and a YAML syntax error are errors.
 * Returns 0, or -1 with a one-line message in err that names the file, the
 * line and the key ("cluster.yaml:7: unknown key 'stall_chek' in
 * 'stall_check' ..."); o may then hold part of the file's settings. */
int hr_config_load(const char *path, struct hr_opts *o, char *err,
                   size_t errlen);

#endif
