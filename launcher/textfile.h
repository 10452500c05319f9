/* textfile.h -- reading the text files horarun is given (a host file, a
 * YAML config file) whole, within fixed limits, so that a huge or binary
 * file (--hostfile /dev/zero) is an error at once, not a memory hog. */
#ifndef HORA_LAUNCHER_TEXTFILE_H
#define HORA_LAUNCHER_TEXTFILE_H

#include <stddef.h>

#define HR_HOSTFILE_MAX (16u << 20) /* bytes in a host file */
#define HR_CONFIG_MAX                                                          \
  (1u << 20) /* bytes in a YAML config file (each                              \
                value is a node of some 100 bytes) */
#define HR_FILE_LINE_MAX                                                       \
  (64u << 10) /* bytes in a line of either, without                            \
                 the '\n' */

/* Reads the file at `path`, at most `max` bytes, into a malloc'd,
 * NUL-terminated *text of *len bytes (caller frees). `what` names the kind of
 * file in messages ("host file"). Returns 0, or -1 with one line in err: cannot
 * read host file 'PATH': <strerror>      (also a directory) PATH: larger than
 * 16 MiB (the most a host file may hold)   (max) PATH:LINE: line longer than
 * 65536 bytes (the most a host file allows) PATH:LINE: NUL byte in the line
 * (not a text file?) Reading stops at the first of these, so /dev/zero fails at
 * once. */
int hr_read_text(const char *path, const char *what, size_t max, char **text,
                 size_t *len, char *err, size_t errlen);

#endif
