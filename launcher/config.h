/* config.h -- horarun's --config-file: a YAML file of Horovod's runtime
 * parameters (horovodrun's keys) and hora's cluster settings (hosts, ssh,
 * environment). Every key is described in hora.yaml(5). */
#ifndef HORA_LAUNCHER_CONFIG_H
#define HORA_LAUNCHER_CONFIG_H

#include <stddef.h>

#include "opts.h"

/* Reads the YAML file at `path` and applies every setting in it to *o, over
 * what is there (the command line parser calls it where --config-file
 * stands, so later flags override the file). o must have been set up by
 * hr_opts_init(); strings the file gives are owned by o.
 *
 * The file is checked strictly: an unknown key, a duplicate key, a value of
 * the wrong type or out of range, and a YAML syntax error are errors.
 * Returns 0, or -1 with a one-line message in err that names the file, the
 * line and the key ("cluster.yaml:7: unknown key 'stall_chek' in
 * 'stall_check' ..."); o may then hold part of the file's settings. */
int hr_config_load(const char *path, struct hr_opts *o, char *err,
                   size_t errlen);

#endif
